package secrets

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/talos-go/talos/internal/apid/certs"
)

func testRequest(t *testing.T) (APIDRequest, *x509.Certificate) {
	t.Helper()

	in, err := generate.NewInput("t", "https://127.0.0.1:6443", constants.DefaultKubernetesVersion,
		generate.WithAdditionalSubjectAltNames([]string{"api.example.com", "10.9.9.9"}))
	if err != nil {
		t.Fatal(err)
	}

	gen, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	data, err := gen.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		t.Fatal(err)
	}

	sec := cfg.Machine().Security()
	req := APIDRequest{
		CACert: sec.IssuingCA().Crt, CAKey: sec.IssuingCA().Key,
		Addresses: []string{"127.6.0.2"}, Hostname: "node-a", CertSANs: sec.CertSANs(),
	}

	ca, err := sec.IssuingCA().GetCert()
	if err != nil {
		t.Fatal(err)
	}

	return req, ca
}

func TestIssueAPID(t *testing.T) {
	req, ca := testRequest(t)

	files, err := Issue(req)
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca)

	server, err := tls.X509KeyPair(files[certs.ServerCrt], files[certs.ServerKey])
	if err != nil {
		t.Fatal(err)
	}

	leaf, _ := x509.ParseCertificate(server.Certificate[0])

	for _, name := range []string{"127.6.0.2", "node-a", "api.example.com", "10.9.9.9"} {
		if _, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}

	if _, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.6.0.3"}); err == nil {
		t.Error("server certificate must not cover other addresses")
	}

	client, err := tls.X509KeyPair(files[certs.ClientCrt], files[certs.ClientKey])
	if err != nil {
		t.Fatal(err)
	}

	cleaf, _ := x509.ParseCertificate(client.Certificate[0])

	if !slices.Equal(cleaf.Subject.Organization, []string{"os:impersonator"}) {
		t.Errorf("client organization %v", cleaf.Subject.Organization)
	}

	if _, err = cleaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
}

func TestWriteAPIDPrivateFiles(t *testing.T) {
	req, _ := testRequest(t)
	dir := filepath.Join(t.TempDir(), "apid")

	files, err := Issue(req)
	if err != nil {
		t.Fatal(err)
	}

	if err = WriteAPID(dir, files); err != nil {
		t.Fatal(err)
	}

	for _, name := range certs.All {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}

		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", name, fi.Mode().Perm())
		}
	}

	b, err := certs.Load(dir)
	if err != nil {
		t.Fatalf("apid cannot load the folder: %v", err)
	}

	leaf, _ := x509.ParseCertificate(b.Server.Certificate[0])
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > APIDLifetime+time.Hour {
		t.Errorf("certificate lifetime %s, want about a day", life)
	}

	delete(files, certs.CA)

	if err = WriteAPID(filepath.Join(t.TempDir(), "apid"), files); err == nil {
		t.Error("an incomplete set must be refused")
	}
}
