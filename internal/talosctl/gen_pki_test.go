package talosctl

import (
	"crypto/ed25519"
	stdx509 "crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"testing"

	"github.com/siderolabs/crypto/x509"
)

func TestGenPKI(t *testing.T) {
	isolate(t)
	t.Chdir(t.TempDir())

	mustRun := func(args ...string) {
		t.Helper()

		if code, _, stderr := run(t, args...); code != 0 {
			t.Fatalf("talosctl %v: %s", args, stderr)
		}
	}

	mustRun("gen", "ca", "--organization", "talos")

	ca := readCert(t, "talos.crt")
	if !ca.IsCA || !slices.Equal(ca.Subject.Organization, []string{"talos"}) {
		t.Errorf("talos.crt: CA %v, organization %v", ca.IsCA, ca.Subject.Organization)
	}

	if hash, _ := os.ReadFile("talos.sha256"); string(hash) != x509.Hash(ca) {
		t.Errorf("talos.sha256 is %q, want %q", hash, x509.Hash(ca))
	}

	// A second run refuses to overwrite and leaves the CA as it was; -f overwrites.
	code, _, stderr := run(t, "gen", "ca", "--organization", "talos")
	mustContain(t, stderr, "talos.crt already exists", "--force")

	if code == 0 || !readCert(t, "talos.crt").Equal(ca) {
		t.Error("gen ca without --force replaced the CA")
	}

	mustRun("gen", "key", "--name", "admin")
	mustRun("gen", "csr", "--key", "admin.key", "--ip", "10.5.0.1", "--roles", "os:reader")
	mustRun("gen", "crt", "--ca", "talos", "--csr", "admin.csr", "--name", "admin", "--hours", "2")

	crt := readCert(t, "admin.crt")
	if _, err := crt.Verify(stdx509.VerifyOptions{Roots: pool(ca), KeyUsages: []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin.crt does not verify as a client certificate of the CA: %v", err)
	}

	if !slices.Equal(crt.Subject.Organization, []string{"os:reader"}) || len(crt.IPAddresses) != 1 || !crt.IPAddresses[0].Equal(net.ParseIP("10.5.0.1")) {
		t.Errorf("admin.crt: organization %v, IPs %v", crt.Subject.Organization, crt.IPAddresses)
	}

	if _, ok := crt.PublicKey.(ed25519.PublicKey); !ok {
		t.Errorf("admin.crt carries a %T, want the Ed25519 key of admin.key", crt.PublicKey)
	}

	mustRun("gen", "keypair", "--organization", "web", "--ip", "10.5.0.2")

	if kp := readCert(t, "web.crt"); len(kp.IPAddresses) != 1 {
		t.Errorf("web.crt IPs %v", kp.IPAddresses)
	}

	for _, f := range []string{"talos.crt", "talos.key", "talos.sha256", "admin.key", "admin.csr", "admin.crt", "web.crt", "web.key"} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v (want 0600)", f, err, st.Mode())
		}
	}

	for args, want := range map[*[]string]string{
		{"gen", "csr", "--key", "admin.key", "--ip", "nope"}:                     `--ip "nope" is not an IP address`,
		{"gen", "csr", "--key", "admin.key", "--ip", "10.0.0.1", "--roles", "x"}: "unknown roles x",
		{"gen", "crt", "--ca", "missing", "--csr", "admin.csr", "--name", "n"}:   "--ca missing: reading the CA certificate",
		{"gen", "ca"}: `required flag(s) "organization" not set`,
	} {
		code, _, stderr := run(t, *args...)
		if code == 0 {
			t.Errorf("%v succeeded", *args)
		}

		mustContain(t, stderr, want)
	}
}

func readCert(t *testing.T, path string) *stdx509.Certificate {
	t.Helper()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}

	crt, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}

	return crt
}

func pool(certs ...*stdx509.Certificate) *stdx509.CertPool {
	p := stdx509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}

	return p
}
