package pki_test

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"slices"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"

	"github.com/talos-go/talos/internal/pki"
)

// A worker's CSR carries its names and usages to trustd, which signs it with the CA.
func TestCSRRoundTrip(t *testing.T) {
	ca := newCA(t) // Ed25519 signs the worker's ECDSA key
	want := pki.Leaf{
		CommonName: "worker-1", Organizations: []string{"os:impersonator"},
		IPs: []net.IP{net.ParseIP("127.5.0.5")}, DNSNames: []string{"worker-1"},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}

	csrPEM, keyPEM, err := pki.NewCSR(want)
	if err != nil {
		t.Fatal(err)
	}

	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		t.Fatal(err)
	}

	if csr.Subject.CommonName != want.CommonName || !slices.Equal(csr.Subject.Organization, want.Organizations) ||
		!slices.Equal(csr.DNSNames, want.DNSNames) || len(csr.IPAddresses) != 1 || !csr.IPAddresses[0].Equal(want.IPs[0]) {
		t.Errorf("CSR asks for %v %v %v", csr.Subject, csr.IPAddresses, csr.DNSNames)
	}

	var usages []x509.ExtKeyUsage

	for _, ext := range csr.Extensions {
		if ext.Id.Equal(pki.OIDExtKeyUsage) {
			if usages, err = pki.ParseExtKeyUsages(ext.Value); err != nil {
				t.Fatal(err)
			}
		}
	}

	if !slices.Equal(usages, want.ExtKeyUsages) {
		t.Errorf("requested usages %v, want %v", usages, want.ExtKeyUsages)
	}

	crtPEM, err := ca.Sign(csr.PublicKey, pki.Leaf{CommonName: csr.Subject.CommonName, ExtKeyUsages: usages, Lifetime: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	if _, err = (&cx509.PEMEncodedCertificateAndKey{Crt: crtPEM, Key: keyPEM}).GetCert(); err != nil {
		t.Fatal(err)
	}

	crt := parse(t, crtPEM)
	if _, err = crt.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("signed CSR does not verify: %v", err)
	}
}

func TestCSRRefusals(t *testing.T) {
	if _, _, err := pki.NewCSR(pki.Leaf{CommonName: "x", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}}); err == nil {
		t.Error("a CSR for code signing was made")
	}

	good, _, err := pki.NewCSR(pki.Leaf{CommonName: "x", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}

	block, _ := pem.Decode(good)
	block.Bytes[len(block.Bytes)-3] ^= 0xff // the signature's last bytes

	for name, data := range map[string][]byte{
		"empty":         nil,
		"not PEM":       []byte("csr"),
		"a certificate": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}),
		"not DER":       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1, 2, 3}}),
		"bad signature": pem.EncodeToMemory(block),
	} {
		if _, err := pki.ParseCSR(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	codeSigning, err := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 3}})
	if err != nil {
		t.Fatal(err)
	}

	for name, value := range map[string][]byte{"code signing": codeSigning, "junk": {1, 2, 3}} {
		if _, err := pki.ParseExtKeyUsages(value); err == nil {
			t.Errorf("%s: usages accepted", name)
		}
	}
}
