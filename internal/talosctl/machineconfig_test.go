package talosctl

import (
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/talos-go/talos/internal/testenv"
)

func TestMachineconfigGenAndPatch(t *testing.T) {
	isolate(t)

	dir := t.TempDir()

	// mc is machineconfig's alias; gen writes what gen config writes.
	if code, _, stderr := run(t, "mc", "gen", "demo", "https://10.0.0.1:6443", "--output-dir", dir); code != 0 {
		t.Fatal(stderr)
	}

	cp := filepath.Join(dir, "controlplane.yaml")
	patch := filepath.Join(dir, "patch.yaml")
	testenv.WriteFile(t, patch, "machine:\n  network:\n    hostname: from-file\n", 0o600)

	// To stdout, two patches in order: the file's hostname wins over the inline one.
	code, out, stderr := run(t, "machineconfig", "patch", cp, "-p", `{"machine":{"network":{"hostname":"inline"}}}`, "-p", "@"+patch)
	if code != 0 {
		t.Fatal(stderr)
	}

	cfg, err := configloader.NewFromBytes([]byte(out))
	if err != nil {
		t.Fatalf("patched config does not load: %v", err)
	}

	if got := cfg.Machine().Network().Hostname(); got != "from-file" {
		t.Errorf("hostname %q, want from-file", got)
	}

	// To a file.
	dst := filepath.Join(dir, "patched.yaml")
	if code, _, stderr = run(t, "mc", "patch", cp, "-p", "@"+patch, "-o", dst); code != 0 {
		t.Fatal(stderr)
	}

	if cfg, err = configloader.NewFromFile(dst); err != nil || cfg.Machine().Network().Hostname() != "from-file" {
		t.Errorf("%s: %v", dst, err)
	}

	for _, args := range [][]string{
		{"mc", "patch", cp},
		{"mc", "patch", filepath.Join(dir, "missing.yaml"), "-p", "@" + patch},
		{"mc", "patch", cp, "-p", "@" + filepath.Join(dir, "missing-patch.yaml")},
	} {
		if code, _, stderr := run(t, args...); code == 0 || stderr == "" {
			t.Errorf("%v: code %d, stderr %q", args, code, stderr)
		}
	}

	code, _, stderr = run(t, "mc", "patch", cp)
	if code == 0 {
		t.Fatal("patch without -p succeeded")
	}

	mustContain(t, stderr, "no patches: pass them with -p")
}
