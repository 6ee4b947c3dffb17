package etcd

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"

	"github.com/talos-go/talos/internal/pki"
)

// testCA makes an etcd CA as talosctl gen config does (ECDSA).
func testCA() (crtPEM, keyPEM []byte, err error) {
	ca, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true), cx509.NotAfter(time.Now().Add(10*365*24*time.Hour)))
	if err != nil {
		return nil, nil, err
	}

	return ca.CrtPEM, ca.KeyPEM, nil
}

func TestWriteCertificates(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	ca, err := pki.ParseCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir() + "/secrets/etcd"

	paths, err := WriteCertificates(ca, dir, CertRequest{Name: "cp-1", IPs: []net.IP{net.ParseIP("127.5.0.2")}})
	if err != nil {
		t.Fatal(err)
	}

	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("secrets folder: %v %v", st.Mode().Perm(), err)
	}

	for _, f := range []string{FileCA, FilePeerCert, FilePeerKey, FileServerCert, FileServerKey, FileClientCert, FileClientKey} {
		st, err := os.Stat(paths.Path(f))
		if err != nil {
			t.Fatal(err)
		}

		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca.Crt)

	for _, c := range []struct {
		file  string
		ip    string
		usage x509.ExtKeyUsage
	}{
		{FilePeerCert, "127.5.0.2", x509.ExtKeyUsageServerAuth},
		{FilePeerCert, "127.5.0.2", x509.ExtKeyUsageClientAuth},
		{FileServerCert, "127.0.0.1", x509.ExtKeyUsageServerAuth},
		{FileServerCert, "127.5.0.2", x509.ExtKeyUsageServerAuth},
		{FileClientCert, "", x509.ExtKeyUsageClientAuth},
	} {
		data, err := os.ReadFile(paths.Path(c.file))
		if err != nil {
			t.Fatal(err)
		}

		block, _ := pem.Decode(data)

		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}

		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s for %v: %v", c.file, c.usage, err)
		}

		if c.ip != "" {
			if err := cert.VerifyHostname(c.ip); err != nil {
				t.Errorf("%s: %v", c.file, err)
			}
		}
	}
}
