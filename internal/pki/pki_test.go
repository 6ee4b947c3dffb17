package pki_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"

	"github.com/talos-go/talos/internal/pki"
)

var (
	serverAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	clientAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
)

// newCA makes a CA of the given kind the way Talos's config generator does, and parses it.
func newCA(t *testing.T, opts ...cx509.Option) *pki.CA {
	t.Helper()

	opts = append([]cx509.Option{cx509.Organization("talos"), cx509.NotAfter(time.Now().Add(10 * 24 * time.Hour))}, opts...)

	gen, err := cx509.NewSelfSignedCertificateAuthority(opts...)
	if err != nil {
		t.Fatal(err)
	}

	ca, err := pki.ParseCA(gen.CrtPEM, gen.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	return ca
}

func parse(t *testing.T, crtPEM []byte) *x509.Certificate {
	t.Helper()

	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return crt
}

func pool(cas ...*pki.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Crt)
	}

	return p
}

func TestIssueChainsToEveryKindOfCA(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []cx509.Option
	}{
		{"ed25519", nil}, // Talos's machine.ca
		{"ecdsa", []cx509.Option{cx509.ECDSA(true)}},
		{"rsa", []cx509.Option{cx509.RSA(true), cx509.Bits(2048)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, other := newCA(t, tc.opts...), newCA(t, tc.opts...)

			pair, err := ca.Issue(pki.Leaf{CommonName: "node-a", ExtKeyUsages: serverAuth, Lifetime: time.Hour, DNSNames: []string{"node-a"}}, time.Now())
			if err != nil {
				t.Fatal(err)
			}

			kp, err := tls.X509KeyPair(pair.Crt, pair.Key)
			if err != nil {
				t.Fatalf("key does not match its certificate: %v", err)
			}

			// Leaves are ECDSA P-256 whatever the CA's key.
			if k, ok := kp.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
				t.Errorf("leaf key %T, want ECDSA P-256", kp.PrivateKey)
			}

			if !strings.Contains(string(pair.Key), "EC PRIVATE KEY") {
				t.Errorf("key PEM type: %.40q", pair.Key)
			}

			crt := parse(t, pair.Crt)

			if _, err = crt.Verify(x509.VerifyOptions{Roots: pool(ca), DNSName: "node-a", KeyUsages: serverAuth}); err != nil {
				t.Errorf("does not verify against its CA: %v", err)
			}

			if _, err = crt.Verify(x509.VerifyOptions{Roots: pool(other), KeyUsages: serverAuth}); err == nil {
				t.Error("verifies against another CA")
			}
		})
	}
}

func TestLeafUsagesAndNames(t *testing.T) {
	ca := newCA(t, cx509.ECDSA(true))
	now := time.Now()

	server, err := ca.Issue(pki.Leaf{
		CommonName:   "node-a",
		IPs:          []net.IP{net.ParseIP("10.9.9.9"), net.ParseIP("fd00::1")},
		DNSNames:     []string{"api.example.com"},
		ExtKeyUsages: serverAuth, Lifetime: time.Hour,
	}, now)
	if err != nil {
		t.Fatal(err)
	}

	client, err := ca.Issue(pki.Leaf{CommonName: "talosctl", Organizations: []string{"os:reader", "os:etcd:backup"}, ExtKeyUsages: clientAuth, Lifetime: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}

	srv, cli := parse(t, server.Crt), parse(t, client.Crt)

	for _, crt := range []*x509.Certificate{srv, cli} {
		if crt.IsCA || !crt.BasicConstraintsValid {
			t.Errorf("%s: IsCA=%v BasicConstraintsValid=%v, want a non-CA with basic constraints", crt.Subject.CommonName, crt.IsCA, crt.BasicConstraintsValid)
		}

		// An ECDSA key signs; it never encrypts.
		if crt.KeyUsage != x509.KeyUsageDigitalSignature {
			t.Errorf("%s: key usage %b, want digital signature only", crt.Subject.CommonName, crt.KeyUsage)
		}
	}

	if !slices.Equal(srv.ExtKeyUsage, serverAuth) || !slices.Equal(cli.ExtKeyUsage, clientAuth) {
		t.Errorf("extended usages: server %v, client %v", srv.ExtKeyUsage, cli.ExtKeyUsage)
	}

	for _, name := range []string{"10.9.9.9", "fd00::1", "api.example.com"} {
		if err = srv.VerifyHostname(name); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}

	for _, name := range []string{"10.9.9.8", "node-a", "example.com"} {
		if err = srv.VerifyHostname(name); err == nil {
			t.Errorf("server certificate covers %s", name)
		}
	}

	if _, err = srv.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: clientAuth}); err == nil {
		t.Error("a server certificate passes as a client certificate")
	}

	if _, err = cli.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: clientAuth}); err != nil {
		t.Errorf("client certificate: %v", err)
	}

	if cli.Subject.CommonName != "talosctl" || !slices.Equal(cli.Subject.Organization, []string{"os:reader", "os:etcd:backup"}) {
		t.Errorf("client subject %v", cli.Subject)
	}

	if len(cli.IPAddresses)+len(cli.DNSNames) != 0 {
		t.Errorf("client certificate has names %v %v", cli.IPAddresses, cli.DNSNames)
	}
}

func TestValidity(t *testing.T) {
	ca := newCA(t, cx509.ECDSA(true))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	pair, err := ca.Issue(pki.Leaf{CommonName: "n", ExtKeyUsages: serverAuth, Lifetime: 6 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}

	crt := parse(t, pair.Crt)
	if !crt.NotBefore.Equal(now.Add(-pki.Backdate)) || !crt.NotAfter.Equal(now.Add(6*time.Hour)) {
		t.Errorf("valid %v to %v, want %v to %v", crt.NotBefore, crt.NotAfter, now.Add(-pki.Backdate), now.Add(6*time.Hour))
	}

	// Never beyond the CA.
	long, err := ca.Issue(pki.Leaf{CommonName: "n", ExtKeyUsages: serverAuth, Lifetime: 100 * 365 * 24 * time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	if got := parse(t, long.Crt).NotAfter; !got.Equal(ca.Crt.NotAfter) {
		t.Errorf("certificate ends %v, its CA %v", got, ca.Crt.NotAfter)
	}

	for _, bad := range []pki.Leaf{
		{CommonName: "zero", ExtKeyUsages: serverAuth},
		{CommonName: "negative", ExtKeyUsages: serverAuth, Lifetime: -time.Hour},
		{CommonName: "unusable", Lifetime: time.Hour},
	} {
		if _, err = ca.Issue(bad, now); err == nil || !strings.Contains(err.Error(), bad.CommonName) {
			t.Errorf("%s: got %v, want an error naming the certificate", bad.CommonName, err)
		}
	}
}

func TestSignRSAKeyMayEncipher(t *testing.T) {
	ca := newCA(t)

	key, err := cx509.NewRSAKey(cx509.Bits(2048))
	if err != nil {
		t.Fatal(err)
	}

	priv, err := (&cx509.PEMEncodedCertificateAndKey{Key: key.KeyPEM}).GetRSAKey()
	if err != nil {
		t.Fatal(err)
	}

	crtPEM, err := ca.Sign(priv.Public(), pki.Leaf{CommonName: "rsa", ExtKeyUsages: serverAuth, Lifetime: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	crt := parse(t, crtPEM)
	if _, ok := crt.PublicKey.(*rsa.PublicKey); !ok || crt.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("RSA leaf: key %T, usage %b", crt.PublicKey, crt.KeyUsage)
	}
}

func TestParseCA(t *testing.T) {
	gen, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true))
	if err != nil {
		t.Fatal(err)
	}

	other, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true))
	if err != nil {
		t.Fatal(err)
	}

	// PKCS#8 as well as the library's EC encoding.
	der, err := x509.MarshalPKCS8PrivateKey(mustKey(t, gen))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = pki.ParseCA(gen.CrtPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		t.Errorf("PKCS#8 key: %v", err)
	}

	for _, tc := range []struct {
		name     string
		crt, key []byte
		want     string
	}{
		{"foreign key", gen.CrtPEM, other.KeyPEM, "does not match"},
		{"junk key", gen.CrtPEM, []byte("junk"), "CA private key"},
		{"junk certificate", []byte("junk"), gen.KeyPEM, "CA certificate"},
	} {
		if _, err := pki.ParseCA(tc.crt, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}

func mustKey(t *testing.T, ca *cx509.CertificateAuthority) any {
	t.Helper()

	key, err := (&cx509.PEMEncodedCertificateAndKey{Crt: ca.CrtPEM, Key: ca.KeyPEM}).GetKey()
	if err != nil {
		t.Fatal(err)
	}

	return key
}

func TestSelfSigned(t *testing.T) {
	cert, err := pki.SelfSigned(pki.Leaf{CommonName: "maintenance", IPs: []net.IP{net.ParseIP("127.5.0.2")}, ExtKeyUsages: serverAuth, Lifetime: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	crt, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}

	roots := x509.NewCertPool()
	roots.AddCert(crt)

	if _, err = crt.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.5.0.2", KeyUsages: serverAuth}); err != nil {
		t.Errorf("self-signed certificate does not verify against itself: %v", err)
	}

	if crt.IsCA {
		t.Error("maintenance certificate is a CA")
	}
}
