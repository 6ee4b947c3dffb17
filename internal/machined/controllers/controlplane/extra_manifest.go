package controlplane

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// ExtraManifestController fetches the manifests a control plane's config names by URL, as
// upstream's: cluster.extraManifests (with cluster.extraManifestHeaders) and, with
// cluster.network.cni.name custom, cluster.network.cni.urls; each becomes a k8s.Manifest the
// apply controller applies. A URL that does not answer is asked again (Retry) until it does.
type ExtraManifestController struct {
	// Client fetches the URLs (default: one with a 30 s timeout that trusts Roots).
	Client *http.Client
	// Roots are the CAs an https URL is trusted by, read at each fetch: the node's trust
	// bundle, which a TrustedRootsConfig extends (nil: the system's).
	Roots func() (*x509.CertPool, error)
	// Retry is the wait before asking again after a failure (default 10 s).
	Retry time.Duration
}

// Name implements controller.Controller.
func (ctrl *ExtraManifestController) Name() string { return "controlplane.ExtraManifestController" }

// Inputs implements controller.Controller.
func (ctrl *ExtraManifestController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *ExtraManifestController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.ManifestType, Kind: controller.OutputShared}}
}

// extraManifest is one URL to fetch, and the manifest's ID.
type extraManifest struct {
	id, url string
	headers map[string]string
}

// Run implements controller.Controller.
func (ctrl *ExtraManifestController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	if ctrl.Retry == 0 {
		ctrl.Retry = 10 * time.Second
	}

	fetched := map[string]string{} // URL: its contents, so a config change does not fetch again

	var retry <-chan time.Time // set while a URL has not answered

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-retry:
		}

		retry = nil

		want, err := ctrl.wanted(ctx, r)
		if err != nil {
			return err
		}

		r.StartTrackingOutputs()

		for _, m := range want {
			contents, ok := fetched[m.url]
			if !ok {
				if contents, err = ctrl.fetch(ctx, m); err != nil {
					log.Warn("fetching a manifest: asking again", zap.String("url", m.url), zap.Error(err))

					retry = time.After(ctrl.Retry)

					continue
				}

				fetched[m.url] = contents
				log.Info("fetched a manifest", zap.String("url", m.url), zap.String("id", m.id))
			}

			objects, err := decodeYAML(contents)
			if err != nil {
				log.Error("the manifest is not valid YAML of Kubernetes objects", zap.String("url", m.url), zap.Error(err))

				continue
			}

			if err = writeManifest(ctx, r, m.id, objects); err != nil {
				return err
			}
		}

		if err = safe.CleanupOutputs[*k8s.Manifest](ctx, r); err != nil {
			return err
		}
	}
}

// wanted are the URLs of the active config, on a control plane.
func (ctrl *ExtraManifestController) wanted(ctx context.Context, r controller.Reader) ([]extraManifest, error) {
	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		return nil, ignoreNotFound(err)
	}

	cluster := cfg.Config().Cluster()
	if cluster == nil || cfg.Config().Machine() == nil || !cfg.Config().Machine().Type().IsControlPlane() {
		return nil, nil
	}

	var out []extraManifest

	if cni := cluster.Network().CNI(); cni != nil && cni.Name() == "custom" {
		for _, u := range cni.URLs() {
			out = append(out, extraManifest{id: manifestID("05-cni", u), url: u})
		}
	}

	for _, u := range cluster.ExtraManifestURLs() {
		out = append(out, extraManifest{id: manifestID("99-extra", u), url: u, headers: cluster.ExtraManifestHeaderMap()})
	}

	return out, nil
}

// manifestID names a fetched manifest: its order prefix, the URL's file name and a short hash
// of the URL (two URLs may end alike).
func manifestID(prefix, u string) string {
	sum := sha256.Sum256([]byte(u))
	name := "manifest"

	if parsed, err := url.Parse(u); err == nil && path.Base(parsed.Path) != "/" && path.Base(parsed.Path) != "." {
		name = strings.TrimSuffix(strings.TrimSuffix(path.Base(parsed.Path), ".yaml"), ".yml")
	}

	return fmt.Sprintf("%s-%s-%s", prefix, name, hex.EncodeToString(sum[:4]))
}

// client is Client, else one trusting the node's current roots (Go reads the system pool only
// once, so a TrustedRootsConfig applied later would not be seen by the default client).
func (ctrl *ExtraManifestController) client() (*http.Client, error) {
	if ctrl.Client != nil {
		return ctrl.Client, nil
	}

	var roots *x509.CertPool

	if ctrl.Roots != nil {
		var err error
		if roots, err = ctrl.Roots(); err != nil {
			return nil, fmt.Errorf("the node's trusted roots: %w", err)
		}
	}

	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}}, nil
}

func (ctrl *ExtraManifestController) fetch(ctx context.Context, m extraManifest) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return "", err
	}

	for k, v := range m.headers {
		req.Header.Set(k, v)
	}

	client, err := ctrl.client()
	if err != nil {
		return "", err
	}

	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", m.url, resp.Status)
	}

	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))

	return string(b), err
}
