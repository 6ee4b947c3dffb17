package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	cx509 "github.com/siderolabs/crypto/x509"

	"github.com/talos-go/talos/internal/pki"
)

// Image is an image of one layer holding files (path in the image to content, all mode 0755)
// that runs entrypoint: a static binary is enough for a pod.
func Image(files map[string][]byte, entrypoint ...string) (v1.Image, error) {
	var buf bytes.Buffer

	tw := tar.NewWriter(&buf)

	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range files {
			if !yield(p) {
				return
			}
		}
	}) {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o755, Size: int64(len(files[p])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}

		if _, err := tw.Write(files[p]); err != nil {
			return nil, err
		}
	}

	if err := tw.Close(); err != nil {
		return nil, err
	}

	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return nil, err
	}

	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}

	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = entrypoint

	return mutate.ConfigFile(img, cfg)
}

// ImageFromTar reads the image of an exported tarball (`docker save`'s or containerd's
// export, which carries the same manifest.json); tag names one of several, "" the only one.
func ImageFromTar(path, tag string) (v1.Image, error) {
	var t *name.Tag

	if tag != "" {
		parsed, err := name.NewTag(tag)
		if err != nil {
			return nil, err
		}

		t = &parsed
	}

	return tarball.ImageFromPath(path, t)
}

// Client is how a push reaches the registry: its credentials and the CA its certificate is
// signed by (nil: the system's roots).
type Client struct {
	Username, Password string
	CA                 []byte
}

// Push pushes img as ref, a reference on the registry (host:port/repository:tag).
func (c Client) Push(ctx context.Context, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("pushing %q: %w", ref, err)
	}

	transport := &http.Transport{ForceAttemptHTTP2: true} // direct: the registry is local

	if len(c.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CA) {
			return errors.New("pushing: the registry CA is not a PEM certificate")
		}

		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}

	auth := authn.Anonymous
	if c.Username != "" {
		auth = &authn.Basic{Username: c.Username, Password: c.Password}
	}

	if err = remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(transport)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}

	return nil
}

// ServerCert makes a CA and a server certificate signed by it for the registry's addresses
// (IPs or names), all PEM: the CA is what clients trust
// (machine.registries.config.<host:port>.tls.ca on a node).
func ServerCert(hosts ...string) (caPEM, crtPEM, keyPEM []byte, err error) {
	const lifetime = 365 * 24 * time.Hour

	ca, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true), cx509.CommonName("talos-go registry CA"), cx509.NotAfter(time.Now().Add(lifetime)))
	if err != nil {
		return nil, nil, nil, err
	}

	signer, err := pki.ParseCA(ca.CrtPEM, ca.KeyPEM)
	if err != nil {
		return nil, nil, nil, err
	}

	leaf := pki.Leaf{CommonName: "registry", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: lifetime}

	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPs = append(leaf.IPs, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}

	pair, err := signer.Issue(leaf, time.Now())
	if err != nil {
		return nil, nil, nil, err
	}

	return ca.CrtPEM, pair.Crt, pair.Key, nil
}
