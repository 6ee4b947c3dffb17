package talosctl

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	mustContain(t, out, "HostnameStatus", "talos-")

	// get rd on a real node: the ALIASES column is {.aliases[:]}.
	out, _ = waitFor(t, ok, append(sock, "get", "rd")...)
	mustContain(t, out, "ALIASES", "hostnamestatuses.net.talos.dev", "hostname hostnamestatus hs")

	for _, format := range []string{"yaml", "json", "jsonpath={.spec.aliases[:]}", "jsonpath-as-json={.spec.aliases}"} {
		out, _ = waitFor(t, ok, append(sock, "get", "rd", "hostnamestatuses.net.talos.dev", "-o", format)...)
		mustContain(t, out, "hostnamestatus")
	}

	out, _ = waitFor(t, ok, append(sock, "get", "machineconfig", "-o", "yaml")...)
	mustContain(t, out, "node: local", "type: MachineConfigs.config.talos.dev")

	checkMetaAndRestart(t, sock, n.State)
	checkInspect(t, sock)
	checkSupport(t, sock, cfg)

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

	// edit: the editor's change is applied; an untouched file applies nothing.
	editor := filepath.Join(t.TempDir(), "editor.sh")
	writeFile(t, editor, "#!/bin/sh\nsed -i 's/network: {}/network:\\n        hostname: edited-node/' \"$1\"\n")

	if err := os.Chmod(editor, 0o700); err != nil {
		t.Fatal(err)
	}

	t.Setenv("TALOS_EDITOR", "true")

	out, _ = waitFor(t, ok, append(sock, "edit", "machineconfig")...)
	mustContain(t, out, "no changes detected")

	t.Setenv("TALOS_EDITOR", editor)
	waitFor(t, ok, append(sock, "edit", "mc", "--mode", "no-reboot")...)
	waitFor(t, func(code int, out, _ string) bool { return code == 0 && strings.Contains(out, "edited-node") }, append(sock, "get", "hostnamestatus")...)

	// A broken edit is refused, the node keeps its config, and the edit is kept for a retry.
	writeFile(t, editor, "#!/bin/sh\nsed -i 's/^version: v1alpha1/version: v1alpha1\\nbogus: [/' \"$1\"\n")

	if code, _, stderr := run(t, append(sock, "edit", "mc")...); code == 0 || !strings.Contains(stderr, "apply-config -f") {
		t.Fatalf("broken edit: code %d, %s", code, stderr)
	}

	out, _ = waitFor(t, ok, append(sock, "get", "hostnamestatus")...)
	mustContain(t, out, "edited-node")

	// usage: each file under /var/log with -a, and the folder's total is at least their sum.
	out, _ = waitFor(t, ok, append(sock, "usage", "-a", "-d", "1", "/var/log")...)
	mustContain(t, out, "NODE", "SIZE", "/var/log/machined.log")

	sizes := map[string]int64{}

	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("usage row %q", line)
		}

		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("usage row %q: %v", line, err)
		}

		sizes[f[2]] = n
	}

	var files int64

	for name, n := range sizes {
		if name != "/var/log" {
			files += n
		}
	}

	if sizes["/var/log/machined.log"] == 0 || sizes["/var/log"] < files {
		t.Fatalf("usage sizes: %v", sizes)
	}

	// Depth 0 is the path's own total only.
	out, _ = waitFor(t, ok, append(sock, "du", "/var/log")...)
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 2 || !strings.HasSuffix(rows[1], " /var/log") {
		t.Fatalf("usage at depth 0:\n%s", out)
	}

	if code, _, stderr := run(t, append(sock, "usage", "/var/no-such-folder")...); code == 0 || !strings.Contains(stderr, "/var/no-such-folder: no such file") || strings.Contains(stderr, "EPHEMERAL") {
		t.Fatalf("usage of a missing folder: code %d, %s", code, stderr)
	}

	// copy: extracted under the folder's own name, the same bytes as read (up to the length
	// at copy time: the log grows).
	dest := t.TempDir()
	waitFor(t, ok, append(sock, "copy", "/var/log", dest)...)

	copied, err := os.ReadFile(filepath.Join(dest, "log", "machined.log"))
	if err != nil {
		t.Fatal(err)
	}

	read, _ := waitFor(t, ok, append(sock, "read", "/var/log/machined.log")...)
	if len(copied) == 0 || !strings.HasPrefix(read, string(copied)) {
		t.Fatalf("copied machined.log (%d bytes) is not a prefix of the node's (%d bytes)", len(copied), len(read))
	}

	// "-" streams the archive itself.
	out, _ = waitFor(t, ok, append(sock, "cp", "/var/log/machined.log", "-")...)
	if !strings.HasPrefix(out, "\x1f\x8b") {
		t.Fatalf("copy to stdout is not gzip: %q", out[:min(len(out), 8)])
	}
}
