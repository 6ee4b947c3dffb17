package talosctl

import (
	"archive/zip"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// readZip returns an archive's files by name.
func readZip(t *testing.T, path string) map[string]string {
	t.Helper()

	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}

	defer zr.Close()

	files := map[string]string{}

	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}

		b, err := io.ReadAll(rc)
		rc.Close()

		if err != nil {
			t.Fatal(err)
		}

		files[f.Name] = string(b)
	}

	return files
}

// checkSupport collects a support archive from a running node (called from the machined-socket
// integration test, which owns the node) and checks its contents.
func checkSupport(t *testing.T, sock []string, cfg []byte) {
	t.Helper()

	// apid's log exists once it has started.
	runUntil(t, ok, append(sock, "logs", "apid")...)

	out := filepath.Join(t.TempDir(), "support.zip")

	_, stderr := runUntil(t, ok, append(sock, "support", "-O", out, "-w", "4", "-v")...)
	mustContain(t, stderr, "local: collecting version", "Support bundle is written to "+out)

	files := readZip(t, out)

	for _, name := range []string{"local/version", "local/processes", "local/mounts", "local/memory", "local/services", "local/machineconfig.yaml", "local/resources/HostnameStatuses.net.talos.dev.yaml"} {
		if files[name] == "" {
			t.Errorf("%s is missing or empty; errors.txt:\n%s\nservices:\n%s", name, files["local/errors.txt"], files["local/services"])
		}
	}

	// Each service's log is there (possibly still empty on a young node).
	if _, ok := files["local/service-logs/apid.log"]; !ok {
		t.Errorf("no apid log; errors.txt:\n%s", files["local/errors.txt"])
	}

	mustContain(t, files["local/processes"], "PID", "COMMAND")
	mustContain(t, files["local/resources/HostnameStatuses.net.talos.dev.yaml"], "node: local", "hostname:")

	for name := range files {
		if strings.Contains(name, "secrets.talos.dev") {
			t.Errorf("%s: secrets must stay out of the archive", name)
		}
	}

	// The config's secrets are redacted: the cluster CA key of the config given to the node
	// is nowhere in the archive.
	given, err := configloader.NewFromBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}

	caKey := string(given.Machine().Security().IssuingCA().Key)
	if len(caKey) < 40 {
		t.Fatal("the test config has no OS CA key")
	}

	mustContain(t, files["local/machineconfig.yaml"], "******")

	for name, content := range files {
		if strings.Contains(content, strings.TrimSpace(caKey)[30:70]) {
			t.Errorf("%s holds the OS CA key", name)
		}
	}

	// Whatever the node lacks is recorded, not fatal (dmesg until the node serves it).
	if files["local/dmesg"] == "" {
		mustContain(t, files["local/errors.txt"], "dmesg:")
	}

	// An existing archive is not overwritten.
	if code, _, stderr := run(t, append(sock, "support", "-O", out)...); code == 0 || !strings.Contains(stderr, "already exists") {
		t.Errorf("second support run: code %d, %s", code, stderr)
	}
}

// TestSupportUnreachableNode: a node that answers nothing gets an errors.txt in the archive.
func TestSupportUnreachableNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s, err := connectSocket(ctx, filepath.Join(t.TempDir(), "no.sock"))
	if err != nil {
		t.Fatal(err)
	}

	defer s.c.Close()

	s.nodes = []string{"10.5.0.9"}
	out := filepath.Join(t.TempDir(), "support.zip")

	var progress strings.Builder
	if err = collectSupport(ctx, s, out, 2, false, &progress); err != nil {
		t.Fatal(err)
	}

	files := readZip(t, out)
	mustContain(t, files["10.5.0.9/errors.txt"], "version:", "processes:", "Unavailable")
	mustContain(t, progress.String(), "10.5.0.9: 0 files")
}
