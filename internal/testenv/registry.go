package testenv

import (
	"crypto/tls"
	"testing"

	"github.com/talos-go/talos/internal/registry"
)

// StartRegistry starts a real OCI registry on host (a port of its own) with TLS from a fresh CA
// and basic auth for users, stopped when the test ends; it returns the registry and the CA's
// PEM to trust it by.
func StartRegistry(t testing.TB, host string, users map[string]string) (*registry.Registry, []byte) {
	t.Helper()

	caPEM, crtPEM, keyPEM, err := registry.ServerCert(host)
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	reg, err := registry.Start(registry.Options{Addr: host + ":0", Cert: &cert, Users: users, BlobDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { reg.Close() })

	return reg, caPEM
}
