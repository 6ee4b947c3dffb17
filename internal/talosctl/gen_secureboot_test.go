package talosctl

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foxboron/go-uefi/efi/signature"
)

// TestGenSecureboot generates upstream's files and reads them back: the UKI certificate with its
// common name, keys only the owner reads, and PK/KEK/db as authenticated variables signed by the
// UKI key over signature lists that hold the right certificate.
func TestGenSecureboot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sb")

	for _, args := range [][]string{
		{"gen", "secureboot", "uki", "-o", out, "--common-name", "Test Signing"},
		{"gen", "secureboot", "pcr", "-o", out},
	} {
		if code, _, stderr := run(t, args...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}

	cert := parseCertFile(t, filepath.Join(out, ukiSigningCert))
	if cert.Subject.CommonName != "Test Signing" {
		t.Errorf("common name %q", cert.Subject.CommonName)
	}

	for _, name := range []string{ukiSigningKey, pcrSigningKey} {
		fi, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}

		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}

		if _, err = readKey(filepath.Join(out, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Without --force nothing is replaced.
	code, _, stderr := run(t, "gen", "secureboot", "pcr", "-o", out)
	if code == 0 || !strings.Contains(stderr, "--force") {
		t.Errorf("second pcr without --force: code %d, stderr %q", code, stderr)
	}

	// db enrolls a separate certificate; PK and KEK hold the signing one.
	enrolledDir := filepath.Join(t.TempDir(), "other")
	if code, _, stderr = run(t, "gen", "secureboot", "uki", "-o", enrolledDir, "--common-name", "Enrolled"); code != 0 {
		t.Fatal(stderr)
	}

	code, _, stderr = run(t, "gen", "secureboot", "database", "-o", out,
		"--enrolled-certificate", filepath.Join(enrolledDir, ukiSigningCert),
		"--signing-certificate", filepath.Join(out, ukiSigningCert),
		"--signing-key", filepath.Join(out, ukiSigningKey))
	if code != 0 {
		t.Fatal(stderr)
	}

	for name, want := range map[string]string{"db.auth": "Enrolled", "KEK.auth": "Test Signing", "PK.auth": "Test Signing"} {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}

		buf := bytes.NewBuffer(data)

		auth, err := signature.ReadEFIVariableAuthencation2(buf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}

		if len(auth.AuthInfo.CertData) == 0 {
			t.Errorf("%s: no signature", name)
		}

		db, err := signature.ReadSignatureDatabase(buf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}

		if len(db) != 1 || len(db[0].Signatures) != 1 || db[0].SignatureType != signature.CERT_X509_GUID {
			t.Fatalf("%s: want one X509 signature list with one entry, got %+v", name, db)
		}

		enrolled, err := x509.ParseCertificate(db[0].Signatures[0].Data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}

		if enrolled.Subject.CommonName != want {
			t.Errorf("%s enrolls %q, want %q", name, enrolled.Subject.CommonName, want)
		}
	}

	code, _, stderr = run(t, "gen", "secureboot", "database", "-o", out, "-f", "--include-well-known-uefi-certs")
	if code == 0 || !strings.Contains(stderr, "--include-well-known-uefi-certs") {
		t.Errorf("well-known certs: code %d, stderr %q", code, stderr)
	}
}

func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}

	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return c
}
