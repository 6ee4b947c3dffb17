// Package trustbundle is the node's trust bundle: the system's CA certificates (the node
// image's, from Debian's ca-certificates) plus the extra roots of the config's
// TrustedRootsConfig documents, as upstream appends them to /etc/ssl/certs/ca-certificates.crt.
// Every program on the node reads it there (containerd's pulls, kubelet, machined); machined's
// own fetches read it afresh with Pool, since Go loads the system pool only once.
package trustbundle

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/security"
)

// Where the bundles are under a node's root. The node's init copies the image's bundle to
// System and binds Node over /etc/ssl/certs/ca-certificates.crt, so machined rewrites the one
// every program reads, in place, while the image stays read-only.
const (
	System = "/system/etc/ssl/system-ca-certificates.crt"
	Node   = "/system/etc/ssl/ca-certificates.crt"
	// Etc is where every program looks for the bundle (Debian's ca-certificates puts it there).
	Etc = "/etc/ssl/certs/ca-certificates.crt"
)

// fix is what an invalid document is told to do.
const fix = "give one or more PEM-encoded CA certificates, each from -----BEGIN CERTIFICATE----- to -----END CERTIFICATE-----"

// Validate checks that every TrustedRootsConfig document holds only PEM certificates: a
// malformed one would silently add nothing to the bundle.
func Validate(cfg talosconfig.Provider) error {
	var errs []error

	for _, doc := range cfg.Documents() {
		tr, ok := doc.(*security.TrustedRootsConfigV1Alpha1)
		if !ok {
			continue
		}

		if _, err := parseCertificates([]byte(tr.Certificates)); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: certificates: %w: %s", security.TrustedRootsConfig, tr.Name(), err, fix))
		}
	}

	return errors.Join(errs...)
}

// parseCertificates reads PEM certificates; anything else, or nothing, is an error.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate

	rest := data

	for n := 1; ; n++ {
		var block *pem.Block

		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}

		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE", n, block.Type)
		}

		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d is not a valid certificate: %w", n, err)
		}

		certs = append(certs, c)
	}

	switch {
	case len(certs) == 0:
		return nil, errors.New("no PEM certificate found")
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, fmt.Errorf("the text after certificate %d is not a PEM certificate", len(certs))
	}

	return certs, nil
}

// Build is the node's bundle: the system's, then each TrustedRootsConfig document's roots
// under a header naming it (cfg nil: the system's alone).
func Build(system []byte, cfg config.Config) []byte {
	out := bytes.Clone(system)

	if cfg == nil {
		return out
	}

	for _, extra := range cfg.TrustedRoots().ExtraTrustedRootCertificates() {
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}

		out = append(out, extra...)
	}

	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}

	return out
}

// Write writes the bundle to path in place: it may be bound over /etc's file, which a rename
// would not replace. An unchanged bundle is not written.
func Write(path string, bundle []byte) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, bundle) {
		return false, nil
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}

	if err := os.WriteFile(path, bundle, 0o644); err != nil {
		return false, fmt.Errorf("writing the trust bundle %s: %w", path, err)
	}

	return true, nil
}

// Pool reads the bundle at path into a pool; without one there yet, the system's pool.
func Pool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return x509.SystemCertPool()
	}

	if err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("the trust bundle %s holds no certificate", path)
	}

	return pool, nil
}
