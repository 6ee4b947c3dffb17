package talosctl

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/machined/testutil"
)

// Integration tests: talosctl against a real machined process, over its machine API socket
// (the hidden --machined-socket flag). When apid serves :50000, the same commands run through
// it with a talosconfig (-e/-n) through apid: internal/e2e runs those commands against a cluster.

// waitFor runs talosctl until check accepts its output or the deadline passes.
func waitFor(t *testing.T, check func(code int, out, stderr string) bool, args ...string) (string, string) {
	t.Helper()

	deadline := time.Now().Add(30 * time.Second)

	for {
		code, out, stderr := run(t, args...)
		if check(code, out, stderr) {
			return out, stderr
		}

		if time.Now().After(deadline) {
			t.Fatalf("talosctl %v: code %d\nstdout:\n%s\nstderr:\n%s", args, code, out, stderr)
		}

		time.Sleep(200 * time.Millisecond)
	}
}

func ok(code int, _, _ string) bool { return code == 0 }

func TestIntegrationMachinedSocket(t *testing.T) {
	isolate(t)

	addr := "127.5.20.1"
	cfg := testutil.Config(t, machine.TypeControlPlane, addr)
	n := testutil.StartNode(t, addr, cfg)
	sock := []string{"--machined-socket", n.Socket()}

	out, _ := waitFor(t, ok, append(sock, "version")...)
	mustContain(t, out, "Client:", "Server:", "Tag:")

	out, _ = waitFor(t, ok, append(sock, "memory")...)
	mustContain(t, out, "NODE", "TOTAL", "AVAILABLE")

	out, _ = waitFor(t, ok, append(sock, "processes")...)
	mustContain(t, out, "PID", "COMMAND")

	out, _ = waitFor(t, ok, append(sock, "mounts")...)
	mustContain(t, out, "MOUNTED ON")

	out, _ = waitFor(t, ok, append(sock, "services")...)
	mustContain(t, out, "SERVICE", "STATE", "HEALTH")

	out, _ = waitFor(t, ok, append(sock, "get", "hostnamestatus")...)
	mustContain(t, out, "HostnameStatuses.net.talos.dev", "talos-")

	out, _ = waitFor(t, ok, append(sock, "get", "machineconfig", "-o", "yaml")...)
	mustContain(t, out, "node: local", "type: MachineConfigs.config.talos.dev")

	// ls / read within the node's view.
	out, _ = waitFor(t, ok, append(sock, "ls", "-l", "/")...)
	mustContain(t, out, "MODE", "NAME")

	// dry-run apply of the same config reports without changing anything.
	cfgFile := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}

	if code, out, stderr := run(t, append(sock, "apply-config", "-f", cfgFile, "--dry-run")...); code != 0 {
		t.Errorf("apply-config --dry-run: %s %s", out, stderr)
	}
}
