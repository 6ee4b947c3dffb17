package services

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/runtime"
)

// waitAPIServerBeforeJoin holds a worker's kubelet until the cluster's API server accepts its
// bootstrap token, when the kubelet has not joined yet (no client certificate): a kubelet that
// starts first asks for its certificate while the API server is down, backs off, and joins tens
// of seconds after the API server is up. A control plane's kubelet runs the API server: it waits
// only for the client certificate machined issues it.
func waitAPIServerBeforeJoin(ctx context.Context, r *runtime.Runtime) error {
	certDir := filepath.Join(r.Paths.Root, k8sctrl.KubeletCertDir)

	// A control plane's: machined issues it with the cluster CA (secrets.KubernetesFilesController).
	if r.MachineType(ctx).IsControlPlane() {
		return waitFiles(ctx, certDir, []string{secretsctrl.KubeletClientCurrent})
	}

	if _, err := os.Stat(filepath.Join(certDir, secretsctrl.KubeletClientCurrent)); err == nil {
		return nil
	}

	kubelet, err := safe.StateWatchFor[*secrets.Kubelet](ctx, r.State, secrets.NewKubelet(secrets.KubeletID).Metadata())
	if err != nil {
		return err
	}

	spec := kubelet.TypedSpec()
	if spec.Endpoint == nil {
		return nil
	}

	// The token goes only to a server the cluster CA vouches for, as kubelet's own request.
	roots := x509.NewCertPool()
	for _, ca := range spec.AcceptedCAs {
		roots.AppendCertsFromPEM(ca.Crt)
	}

	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
	}
	defer client.CloseIdleConnections()

	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.Endpoint.JoinPath("version").String(), nil)
		if err != nil {
			return fmt.Errorf("the cluster endpoint %s: %w", spec.Endpoint, err)
		}

		req.Header.Set("Authorization", "Bearer "+spec.BootstrapTokenID+"."+spec.BootstrapTokenSecret)

		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()

			if resp.StatusCode == http.StatusOK { // 401 until machined has put the token in
				return nil
			}
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
