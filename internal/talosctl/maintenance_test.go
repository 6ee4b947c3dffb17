package talosctl

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// TestGetInsecure: a node without a config answers `get --insecure` for hardware, disks and
// network through its maintenance API, and refuses the rest.
func TestGetInsecure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts machined")
	}

	addr := testenv.Loopback(79) + "1"
	testenv.StartNode(t, addr, nil)

	talosctl := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer

		code := Execute(append([]string{"--talosconfig", t.TempDir() + "/none"}, args...), &stdout, &stderr)

		return stdout.String(), stderr.String(), code
	}

	// The maintenance API comes up once the boot reaches it.
	testenv.WaitFor(t, "the maintenance API", 30*time.Second, func() bool {
		_, _, code := talosctl("-n", addr, "version", "--insecure")

		return code == 0
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "systeminformation"}, "SystemInformation"},
		{[]string{"get", "cpus"}, "CPU_0"},
		{[]string{"get", "disks", "-o", "yaml"}, "Disks.block.talos.dev"},
		{[]string{"get", "nodeaddresses"}, addr + "/32"},
	} {
		out, errOut, code := talosctl(append(append([]string{"-n", addr}, tc.args...), "--insecure")...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("talosctl %v --insecure: exit %d, want %q in\n%s%s", tc.args, code, tc.want, out, errOut)
		}
	}

	if _, errOut, code := talosctl("-n", addr, "get", "services", "--insecure"); code == 0 || !strings.Contains(errOut, "maintenance") {
		t.Errorf("services through maintenance: exit %d\n%s", code, errOut)
	}

	// META, as upstream's maintenance API: a key written is there to delete (once: a second
	// delete finds nothing).
	if out, errOut, code := talosctl("-n", addr, "meta", "write", "0x0c", "maintenance-value", "--insecure"); code != 0 {
		t.Errorf("meta write --insecure: exit %d\n%s%s", code, out, errOut)
	}

	if out, errOut, code := talosctl("-n", addr, "get", "metakeys", "--insecure"); code != 0 || !strings.Contains(out, "maintenance-value") {
		t.Errorf("get metakeys --insecure after a write: exit %d\n%s%s", code, out, errOut)
	}

	if out, errOut, code := talosctl("-n", addr, "meta", "delete", "0x0c", "--insecure"); code != 0 {
		t.Errorf("meta delete --insecure of the key written: exit %d\n%s%s", code, out, errOut)
	}

	if _, errOut, code := talosctl("-n", addr, "meta", "delete", "0x0c", "--insecure"); code == 0 || !strings.Contains(strings.ToLower(errOut), "not") {
		t.Errorf("meta delete --insecure of a deleted key: exit %d\n%s", code, errOut)
	}

	// Upgrade and reset reach maintenance mode too: this node has no A/B slots, and maintenance
	// mode resets the whole system or nothing. Neither changes the node.
	if _, errOut, code := talosctl("-n", addr, "upgrade", "--insecure", "--image", "/nonexistent.img"); code == 0 || !strings.Contains(errOut, "A/B slots") {
		t.Errorf("upgrade --insecure of a node with no slots: exit %d\n%s", code, errOut)
	}

	if _, errOut, code := talosctl("-n", addr, "reset", "--insecure", "--system-labels-to-wipe", "STATE"); code == 0 || !strings.Contains(errOut, "maintenance mode") {
		t.Errorf("reset --insecure of one partition: exit %d\n%s", code, errOut)
	}

	checkCertFingerprint(t, talosctl, addr)
}

// checkCertFingerprint: apply-config --insecure with a fingerprint the node's certificate does
// not have is refused before anything is sent; the node's own fingerprint passes the TLS step.
func checkCertFingerprint(t *testing.T, talosctl func(args ...string) (string, string, int), addr string) {
	t.Helper()

	cfgFile := t.TempDir() + "/cfg.yaml"
	if err := os.WriteFile(cfgFile, testenv.Config(t, mtype.TypeWorker, addr), 0o600); err != nil {
		t.Fatal(err)
	}

	wrong := strings.Repeat("ab", 32)

	_, errOut, code := talosctl("-n", addr, "apply-config", "--insecure", "--dry-run", "-f", cfgFile, "--cert-fingerprint", wrong)
	if code == 0 || !strings.Contains(errOut, "is not one of --cert-fingerprint") {
		t.Fatalf("wrong fingerprint: exit %d\n%s", code, errOut)
	}

	// The refusal names the fingerprint the node presented: pinning it works.
	m := regexp.MustCompile(`certificate fingerprint (\S+) is not one`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no fingerprint in %q", errOut)
	}

	_, errOut, _ = talosctl("-n", addr, "apply-config", "--insecure", "--dry-run", "-f", cfgFile, "--cert-fingerprint", m[1])
	if strings.Contains(errOut, "fingerprint") {
		t.Errorf("the node's own fingerprint was refused: %s", errOut)
	}

	if _, errOut, code = talosctl("-n", addr, "apply-config", "--insecure", "-f", cfgFile, "--cert-fingerprint", "zz"); code == 0 || !strings.Contains(errOut, `--cert-fingerprint "zz"`) {
		t.Errorf("bad fingerprint syntax: exit %d, %s", code, errOut)
	}
}
