package talosctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// Integration tests: talosctl against a real machined process, over its machine API socket
// (the hidden --machined-socket flag). When apid serves :50000, the same commands run through
// it with a talosconfig (-e/-n) through apid: internal/e2e runs those commands against a cluster.

// runUntil runs talosctl until check accepts its output.
func runUntil(t *testing.T, check func(code int, out, stderr string) bool, args ...string) (string, string) {
	t.Helper()

	var out, stderr string

	testenv.WaitFor(t, fmt.Sprintf("talosctl %v", args), 30*time.Second, func() error {
		var code int
		if code, out, stderr = run(t, args...); check(code, out, stderr) {
			return nil
		}

		return fmt.Errorf("code %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	})

	return out, stderr
}

func ok(code int, _, _ string) bool { return code == 0 }

func TestIntegrationMachinedSocket(t *testing.T) {
	isolate(t)

	addr := "127.5.20.1"
	cfg := testenv.Config(t, machine.TypeControlPlane, addr)
	n := testenv.StartNode(t, addr, cfg)
	sock := []string{"--machined-socket", n.Socket()}

	// Read-only commands, each retried until the node serves it.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"version"}, []string{"Client:", "Server:", "Tag:"}},
		{[]string{"memory"}, []string{"NODE", "TOTAL", "AVAILABLE"}},
		{[]string{"processes"}, []string{"PID", "COMMAND"}},
		{[]string{"mounts"}, []string{"MOUNTED ON"}},
		{[]string{"services"}, []string{"SERVICE", "STATE", "HEALTH"}},
		{[]string{"get", "hostnamestatus"}, []string{"HostnameStatus", "talos-"}},
		// get rd on a real node: the ALIASES column is {.aliases[:]}.
		{[]string{"get", "rd"}, []string{"ALIASES", "hostnamestatuses.net.talos.dev", "hostname hostnamestatus hs"}},
		{[]string{"get", "rd", "hostnamestatuses.net.talos.dev", "-o", "yaml"}, []string{"hostnamestatus"}},
		{[]string{"get", "rd", "hostnamestatuses.net.talos.dev", "-o", "json"}, []string{"hostnamestatus"}},
		{[]string{"get", "rd", "hostnamestatuses.net.talos.dev", "-o", "jsonpath={.spec.aliases[:]}"}, []string{"hostnamestatus"}},
		{[]string{"get", "rd", "hostnamestatuses.net.talos.dev", "-o", "jsonpath-as-json={.spec.aliases}"}, []string{"hostnamestatus"}},
		{[]string{"get", "machineconfig", "-o", "yaml"}, []string{"node: local", "type: MachineConfigs.config.talos.dev"}},
		{[]string{"ls", "-l", "/"}, []string{"MODE", "NAME"}}, // within the node's view
	} {
		out, _ := runUntil(t, ok, append(sock, c.args...)...)
		mustContain(t, out, c.want...)
	}

	checkMetaAndRestart(t, sock, n.State)
	checkInspect(t, sock)
	checkSupport(t, sock, cfg)

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
	testenv.WriteFile(t, editor, "#!/bin/sh\nsed -i 's/network: {}/network:\\n        hostname: edited-node/' \"$1\"\n", 0o600)

	if err := os.Chmod(editor, 0o700); err != nil {
		t.Fatal(err)
	}

	t.Setenv("TALOS_EDITOR", "true")

	out, _ := runUntil(t, ok, append(sock, "edit", "machineconfig")...)
	mustContain(t, out, "no changes detected")

	t.Setenv("TALOS_EDITOR", editor)
	runUntil(t, ok, append(sock, "edit", "mc", "--mode", "no-reboot")...)
	runUntil(t, func(code int, out, _ string) bool { return code == 0 && strings.Contains(out, "edited-node") }, append(sock, "get", "hostnamestatus")...)

	// A broken edit is refused, the node keeps its config, and the edit is kept for a retry.
	testenv.WriteFile(t, editor, "#!/bin/sh\nsed -i 's/^version: v1alpha1/version: v1alpha1\\nbogus: [/' \"$1\"\n", 0o600)

	if code, _, stderr := run(t, append(sock, "edit", "mc")...); code == 0 || !strings.Contains(stderr, "apply-config -f") {
		t.Fatalf("broken edit: code %d, %s", code, stderr)
	}

	out, _ = runUntil(t, ok, append(sock, "get", "hostnamestatus")...)
	mustContain(t, out, "edited-node")

	// usage: each file under /var/log with -a, and the folder's total is at least their sum.
	out, _ = runUntil(t, ok, append(sock, "usage", "-a", "-d", "1", "/var/log")...)
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
	out, _ = runUntil(t, ok, append(sock, "du", "/var/log")...)
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 2 || !strings.HasSuffix(rows[1], " /var/log") {
		t.Fatalf("usage at depth 0:\n%s", out)
	}

	if code, _, stderr := run(t, append(sock, "usage", "/var/no-such-folder")...); code == 0 || !strings.Contains(stderr, "/var/no-such-folder: no such file") || strings.Contains(stderr, "EPHEMERAL") {
		t.Fatalf("usage of a missing folder: code %d, %s", code, stderr)
	}

	// copy: extracted under the folder's own name, the same bytes as read (up to the length
	// at copy time: the log grows).
	dest := t.TempDir()
	runUntil(t, ok, append(sock, "copy", "/var/log", dest)...)

	copied, err := os.ReadFile(filepath.Join(dest, "log", "machined.log"))
	if err != nil {
		t.Fatal(err)
	}

	read, _ := runUntil(t, ok, append(sock, "read", "/var/log/machined.log")...)
	if len(copied) == 0 || !strings.HasPrefix(read, string(copied)) {
		t.Fatalf("copied machined.log (%d bytes) is not a prefix of the node's (%d bytes)", len(copied), len(read))
	}

	// "-" streams the archive itself.
	out, _ = runUntil(t, ok, append(sock, "cp", "/var/log/machined.log", "-")...)
	if !strings.HasPrefix(out, "\x1f\x8b") {
		t.Fatalf("copy to stdout is not gzip: %q", out[:min(len(out), 8)])
	}
}
