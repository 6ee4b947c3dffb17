package trustbundle_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/security"

	"github.com/talos-go/talos/internal/machined/trustbundle"
)

func testCAPEM(t *testing.T) string {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}

	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func rootsDoc(name, certs string) *security.TrustedRootsConfigV1Alpha1 {
	d := security.NewTrustedRootsConfigV1Alpha1()
	d.MetaName, d.Certificates = name, certs

	return d
}

// TestValidateTrustedRoots: a TrustedRootsConfig whose certificates are not PEM certificates
// is refused naming the document and the fix; good ones pass.
func TestValidateTrustedRoots(t *testing.T) {
	good := testCAPEM(t)

	for name, tc := range map[string]struct {
		certs   string
		wantErr string
	}{
		"one certificate":         {certs: good},
		"two certificates":        {certs: good + "\n" + testCAPEM(t)},
		"not PEM":                 {certs: "MIIBszCCAVmgAwIBAgIU", wantErr: "no PEM certificate found"},
		"empty":                   {certs: "  \n", wantErr: "no PEM certificate found"},
		"a key, not a cert":       {certs: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", wantErr: `PEM block 1 is a "PRIVATE KEY", not a CERTIFICATE`},
		"damaged certificate":     {certs: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", wantErr: "PEM block 1 is not a valid certificate"},
		"text after certificate":  {certs: good + "garbage\n", wantErr: "the text after certificate 1 is not a PEM certificate"},
		"truncated (no END line)": {certs: good[:len(good)-30], wantErr: "no PEM certificate found"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := container.New(rootsDoc("corp-ca", tc.certs))
			if err != nil {
				t.Fatal(err)
			}

			err = trustbundle.Validate(cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid certificates refused: %v", err)
				}

				return
			}

			if err == nil {
				t.Fatal("malformed certificates accepted")
			}

			for _, want := range []string{`TrustedRootsConfig "corp-ca": certificates: `, tc.wantErr, "-----BEGIN CERTIFICATE-----"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestBuild: the system's bundle first, then each document's roots under its name.
func TestBuild(t *testing.T) {
	ca1, ca2 := testCAPEM(t), testCAPEM(t)

	cfg, err := container.New(rootsDoc("first", ca1), rootsDoc("second", ca2))
	if err != nil {
		t.Fatal(err)
	}

	got := string(trustbundle.Build([]byte("SYSTEM"), cfg))

	i1, i2 := strings.Index(got, "first:\n"+strings.Repeat("=", 6)+"\n"+ca1), strings.Index(got, "second:\n")

	if !strings.HasPrefix(got, "SYSTEM\n") || i1 < 0 || i2 < i1 || !strings.Contains(got, ca2) {
		t.Errorf("bundle:\n%s", got)
	}

	if got := string(trustbundle.Build([]byte("SYSTEM\n"), nil)); got != "SYSTEM\n" {
		t.Errorf("without a config: %q", got)
	}
}
