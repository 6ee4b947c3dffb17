package upgrade

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	registryconfig "github.com/containerd/containerd/v2/core/remotes/docker/config"
	remoteserrors "github.com/containerd/containerd/v2/core/remotes/errors"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/controllers/cri"
)

// isImageReference reports whether an upgrade's --image names an installer image in a registry:
// neither a path nor a URL, and its first component is a registry host (has a dot or a port,
// or is localhost), as a reference a node can resolve without a default registry must be.
func isImageReference(s string) bool {
	if strings.HasPrefix(s, "/") || strings.Contains(s, "://") {
		return false
	}

	host, _, ok := strings.Cut(s, "/")

	return ok && (strings.ContainsAny(host, ".:") || host == "localhost")
}

// pullSource is where an installer pull looks: machine.registries, rendered into the hosts
// folder layout CRI's pulls use (into hostsDir, a scratch folder), so an upgrade resolves
// through the same mirrors and TLS settings as the node's containers, plus each host's auth.
type pullSource struct {
	regs     talosconfig.Registries
	hostsDir string
}

// pullInstaller resolves ref through the node's registry settings and streams the signed image
// in its layer into ExtractFrom (dest must not exist). Nothing is stored but dest, which is
// removed again if the pull fails after unpacking (a layer whose digest is wrong).
func pullInstaller(ctx context.Context, src pullSource, ref string, keys []ed25519.PublicKey, dest string) (*imager.Manifest, error) {
	spec, err := reference.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w: give HOST[:PORT]/REPOSITORY:TAG or @sha256:DIGEST", ref, err)
	}

	if err = cri.WriteHosts(src.hostsDir, src.regs); err != nil {
		return nil, fmt.Errorf("machine.registries: %w", err)
	}

	hosts := registryconfig.ConfigureHosts(ctx, registryconfig.HostOptions{
		HostDir:     registryconfig.HostDirFromRoot(src.hostsDir),
		Credentials: credentials(src.regs),
	})

	// The hosts tried, in order, so that errors can name them.
	var tried []string
	if rh, herr := hosts(spec.Hostname()); herr == nil {
		for _, h := range rh {
			tried = append(tried, h.Scheme+"://"+h.Host+h.Path)
		}
	}

	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hosts})

	name, desc, err := resolver.Resolve(ctx, spec.String())
	if err != nil {
		return nil, pullError(ref, tried, err)
	}

	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return nil, pullError(ref, tried, err)
	}

	// A digest reference pins the manifest (index) it names: a mirror serving anything else is refused.
	if d := spec.Digest(); d != "" && d != desc.Digest {
		return nil, fmt.Errorf("%w: %s: the registry answered with manifest %s, not the pinned digest", imager.ErrRefused, ref, desc.Digest)
	}

	man, err := fetchManifest(ctx, fetcher, desc)
	if err != nil {
		return nil, pullError(ref, tried, err)
	}

	cfgData, err := fetchBlob(ctx, fetcher, man.Config, 1<<20)
	if err != nil {
		return nil, pullError(ref, tried, err)
	}

	var cf v1.ConfigFile
	if err = json.Unmarshal(cfgData, &cf); err != nil {
		return nil, fmt.Errorf("%w: %s: its config is not an image config: %w", imager.ErrNotInstaller, ref, err)
	}

	if _, err = imager.CheckInstallerConfig(&cf, runtime.GOARCH); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}

	if len(man.Layers) != 1 {
		return nil, fmt.Errorf("%w: %s has %d layers, an installer image has one", imager.ErrNotInstaller, ref, len(man.Layers))
	}

	return extractLayer(ctx, fetcher, ref, man.Layers[0], keys, dest)
}

// extractLayer streams the installer layer into ExtractFrom, checking the layer's digest once
// all of it is read.
func extractLayer(ctx context.Context, fetcher remotes.Fetcher, ref string, desc ocispec.Descriptor, keys []ed25519.PublicKey, dest string) (*imager.Manifest, error) {
	rc, err := fetcher.Fetch(ctx, desc)
	if err != nil {
		return nil, fmt.Errorf("fetching the layer of %s: %w", ref, err)
	}
	defer rc.Close()

	verifier := desc.Digest.Verifier()
	body := bufio.NewReader(io.TeeReader(rc, verifier))

	var tarStream io.Reader = body

	switch desc.MediaType {
	case ocispec.MediaTypeImageLayerGzip, "application/vnd.docker.image.rootfs.diff.tar.gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: its layer is not gzip: %w", imager.ErrRefused, ref, err)
		}

		tarStream = zr
	case ocispec.MediaTypeImageLayer:
	default:
		return nil, fmt.Errorf("%w: %s: layer type %q (an installer layer is a tar, gzip or not)", imager.ErrNotInstaller, ref, desc.MediaType)
	}

	payload, err := imager.InstallerPayload(tarStream)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}

	man, err := imager.ExtractFrom(payload, keys, dest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}

	// What follows the image in the layer is tar padding: read it to check the whole layer.
	if _, err = io.Copy(io.Discard, body); err == nil && !verifier.Verified() {
		err = fmt.Errorf("%w: %s: its layer does not match its digest %s", imager.ErrRefused, ref, desc.Digest)
	}

	if err != nil {
		os.RemoveAll(dest)

		return nil, fmt.Errorf("reading the layer of %s: %w", ref, err)
	}

	return man, nil
}

// fetchManifest reads the image manifest desc names, choosing this machine's from an index.
func fetchManifest(ctx context.Context, fetcher remotes.Fetcher, desc ocispec.Descriptor) (*ocispec.Manifest, error) {
	data, err := fetchBlob(ctx, fetcher, desc, 4<<20)
	if err != nil {
		return nil, err
	}

	switch desc.MediaType {
	case ocispec.MediaTypeImageIndex, "application/vnd.docker.distribution.manifest.list.v2+json":
		var idx ocispec.Index
		if err = json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("%w: its index does not parse: %w", imager.ErrRefused, err)
		}

		var have []string

		for _, m := range idx.Manifests {
			if m.Platform == nil {
				continue
			}

			if m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
				return fetchManifest(ctx, fetcher, m)
			}

			have = append(have, m.Platform.OS+"/"+m.Platform.Architecture)
		}

		return nil, fmt.Errorf("%w: no linux/%s image in its index (it has %s)", imager.ErrRefused, runtime.GOARCH, strings.Join(have, ", "))
	case ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json":
		var m ocispec.Manifest
		if err = json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%w: its manifest does not parse: %w", imager.ErrRefused, err)
		}

		return &m, nil
	}

	return nil, fmt.Errorf("%w: manifest type %q", imager.ErrNotInstaller, desc.MediaType)
}

// fetchBlob reads a small blob whole and checks its digest.
func fetchBlob(ctx context.Context, fetcher remotes.Fetcher, desc ocispec.Descriptor, limit int64) ([]byte, error) {
	if desc.Size > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a manifest or config may have", imager.ErrRefused, desc.Digest, desc.Size, limit)
	}

	rc, err := fetcher.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()

	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}

	if v := desc.Digest.Verifier(); func() bool { v.Write(data); return !v.Verified() }() { //nolint:errcheck // a digester's Write never fails
		return nil, fmt.Errorf("%w: %s: the registry sent content that does not match this digest", imager.ErrRefused, desc.Digest)
	}

	return data, nil
}

// credentials answers containerd's question "what are the credentials for host" from
// machine.registries.config.<host>.auth: a user name and password, an auth string (base64 of
// user:password) or an identity token (given as the password with no user name).
func credentials(regs talosconfig.Registries) func(host string) (string, string, error) {
	return func(host string) (string, string, error) {
		if regs == nil {
			return "", "", nil
		}

		rc, ok := regs.Config()[host]
		if !ok || rc.Auth() == nil {
			return "", "", nil
		}

		a := rc.Auth()

		switch {
		case a.Username() != "" || a.Password() != "":
			return a.Username(), a.Password(), nil
		case a.Auth() != "":
			raw, err := base64.StdEncoding.DecodeString(a.Auth())
			if err != nil {
				return "", "", fmt.Errorf("machine.registries.config.%s.auth.auth: not base64 of user:password: %w", host, err)
			}

			user, pass, _ := strings.Cut(string(raw), ":")

			return user, pass, nil
		case a.IdentityToken() != "":
			return "", a.IdentityToken(), nil
		}

		return "", "", nil
	}
}

// pullError names the cause of a failed pull in the operator's terms: the image is not there,
// the credentials were refused, or no registry could be reached.
func pullError(ref string, tried []string, err error) error {
	where := "tried " + strings.Join(tried, ", then ")

	var status remoteserrors.ErrUnexpectedStatus

	var netErr net.Error

	switch {
	case errors.As(err, &status) && (status.StatusCode == http.StatusUnauthorized || status.StatusCode == http.StatusForbidden):
		host := "<host:port>"
		if u, perr := url.Parse(status.RequestURL); perr == nil {
			host = u.Host
		}

		return fmt.Errorf("pulling %s: %s refused the credentials (authentication failed: check machine.registries.config.%q.auth) (%s): %w", ref, host, host, where, err)
	case errors.Is(err, docker.ErrInvalidAuthorization):
		return fmt.Errorf("pulling %s: the registry refused the credentials (authentication failed: check machine.registries.config.<host:port>.auth) (%s): %w", ref, where, err)
	case errdefs.IsNotFound(err):
		return notFound{fmt.Errorf("pulling %s: not found (%s): %w", ref, where, err)}
	case errors.As(err, &netErr):
		return fmt.Errorf("pulling %s: registry unreachable (%s; check machine.registries.mirrors and the network): %w", ref, where, err)
	}

	return fmt.Errorf("pulling %s (%s): %w", ref, where, err)
}

// notFound is an image the registries do not have: the upgrade answers NotFound, as for a file.
type notFound struct{ error }

func (e notFound) Unwrap() error { return e.error }

func (notFound) Is(target error) bool { return target == os.ErrNotExist }
