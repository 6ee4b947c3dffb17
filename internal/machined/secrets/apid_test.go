package secrets

import (
	"crypto/tls"
	"crypto/x509"
	"net"
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

	req, err := RequestFromConfig(cfg, []string{"127.6.0.2"}, "node-a")
	if err != nil {
		t.Fatal(err)
	}

	ca, err := cfg.Machine().Security().IssuingCA().GetCert()
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

	leaf, _ := x509.ParseCertificate(server.Certificate[0]) //nolint:errcheck

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

	cleaf, _ := x509.ParseCertificate(client.Certificate[0]) //nolint:errcheck

	if !slices.Equal(cleaf.Subject.Organization, []string{"os:impersonator"}) {
		t.Errorf("client organization %v", cleaf.Subject.Organization)
	}

	if _, err = cleaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
}

func TestEnsureAPIDWritesPrivateFilesAndRenewsOnChange(t *testing.T) {
	req, _ := testRequest(t)
	dir := filepath.Join(t.TempDir(), "apid")

	wrote, err := EnsureAPID(dir, req)
	if err != nil || !wrote {
		t.Fatalf("first ensure: %v %v", wrote, err)
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

	if _, err = certs.Load(dir); err != nil {
		t.Fatalf("apid cannot load the folder: %v", err)
	}

	if wrote, err = EnsureAPID(dir, req); err != nil || wrote {
		t.Errorf("unchanged request must not rewrite: %v %v", wrote, err)
	}

	req.Addresses = append(req.Addresses, "127.6.0.9")

	if wrote, err = EnsureAPID(dir, req); err != nil || !wrote {
		t.Errorf("a new address must reissue: %v %v", wrote, err)
	}

	b, _ := certs.Load(dir)                                   //nolint:errcheck
	leaf, _ := x509.ParseCertificate(b.Server.Certificate[0]) //nolint:errcheck

	if !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("127.6.0.9")) }) {
		t.Errorf("new address missing: %v", leaf.IPAddresses)
	}

	// Past two thirds of its lifetime the certificate is renewed.
	if APIDCurrent(dir, req, time.Now().Add(APIDLifetime*3/4)) {
		t.Error("an aged certificate must be due for renewal")
	}
}
