package certs_test

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/pki"
)

// The folder machined writes is private and loads as apid's bundle; an incomplete one is refused.
func TestWriteFilesLoads(t *testing.T) {
	gen, err := cx509.NewSelfSignedCertificateAuthority() // Ed25519, as Talos's machine.ca
	if err != nil {
		t.Fatal(err)
	}

	ca, err := pki.ParseCA(gen.CrtPEM, gen.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	issue := func(l pki.Leaf) *cx509.PEMEncodedCertificateAndKey {
		l.CommonName, l.Lifetime = "node-a", time.Hour

		pair, err := ca.Issue(l, time.Now())
		if err != nil {
			t.Fatal(err)
		}

		return pair
	}

	server := issue(pki.Leaf{IPs: []net.IP{net.ParseIP("127.6.0.2")}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	client := issue(pki.Leaf{Organizations: []string{"os:impersonator"}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	files := map[string][]byte{
		certs.CA:        pki.Bundle(ca.CrtPEM),
		certs.ServerCrt: server.Crt, certs.ServerKey: server.Key,
		certs.ClientCrt: client.Crt, certs.ClientKey: client.Key,
	}

	dir := filepath.Join(t.TempDir(), "apid")
	if err = certs.WriteFiles(dir, files); err != nil {
		t.Fatal(err)
	}

	for _, name := range certs.All {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}

		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}

	b, err := certs.Load(dir)
	if err != nil {
		t.Fatalf("apid cannot load the folder: %v", err)
	}

	if _, err = b.Server.Leaf.Verify(x509.VerifyOptions{Roots: b.CAs, DNSName: "127.6.0.2"}); err != nil {
		t.Errorf("server certificate does not verify against the folder's CA: %v", err)
	}

	if b.Client == nil {
		t.Error("the client certificate written was not loaded")
	}

	// A worker: no client certificate. The stale client files go, the rest loads without them.
	worker := map[string][]byte{certs.CA: files[certs.CA], certs.ServerCrt: server.Crt, certs.ServerKey: server.Key}
	if err = certs.WriteFiles(dir, worker); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{certs.ClientCrt, certs.ClientKey} {
		if _, err = os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s left in a folder written without it (stat: %v)", name, err)
		}
	}

	if b, err = certs.Load(dir); err != nil || b.Client != nil {
		t.Errorf("folder without a client certificate: load error %v, client %v; want loaded without one", err, b)
	}

	// A client certificate without its key is a broken folder, not a worker's.
	if err = os.WriteFile(filepath.Join(dir, certs.ClientCrt), client.Crt, 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err = certs.Load(dir); err == nil {
		t.Error("a client certificate without its key was loaded")
	}

	delete(files, certs.CA)

	if err = certs.WriteFiles(filepath.Join(t.TempDir(), "apid"), files); err == nil {
		t.Error("an incomplete set was written")
	}
}
