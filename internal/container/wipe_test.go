package container

import (
	"os"
	"path/filepath"
	"testing"
)

func TestApplyWipe(t *testing.T) {
	disk := t.TempDir()
	for _, f := range []string{"STATE/config.yaml", "EPHEMERAL/upper/lib/etcd/x", "META/meta", "BOOT/A"} {
		p := filepath.Join(disk, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	spec := Spec{Disk: disk, Config: "/somewhere/config.yaml"}

	// No request: nothing changes.
	if err := applyWipe(&spec); err != nil || spec.Config == "" {
		t.Fatalf("without a request: %v, config %q", err, spec.Config)
	}

	if err := os.WriteFile(filepath.Join(disk, "META", wipeRequest), []byte("STATE\nEPHEMERAL\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := applyWipe(&spec); err != nil {
		t.Fatal(err)
	}

	for _, d := range []string{"STATE", "EPHEMERAL"} {
		if entries, err := os.ReadDir(filepath.Join(disk, d)); err != nil || len(entries) != 0 {
			t.Errorf("%s after the wipe: %v %v", d, entries, err)
		}
	}

	for _, f := range []string{"META/meta", "BOOT/A"} {
		if _, err := os.Stat(filepath.Join(disk, f)); err != nil {
			t.Errorf("%s was wiped: %v", f, err)
		}
	}

	if _, err := os.Stat(filepath.Join(disk, "META", wipeRequest)); !os.IsNotExist(err) {
		t.Errorf("the request is still there: %v", err)
	}

	if spec.Config != "" {
		t.Error("after STATE is wiped the first-boot config must not be given again")
	}

	// A request for another partition is refused and wipes nothing.
	if err := os.WriteFile(filepath.Join(disk, "META", wipeRequest), []byte("BOOT\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := applyWipe(&spec); err == nil {
		t.Fatal("a wipe of BOOT was accepted")
	}

	if _, err := os.Stat(filepath.Join(disk, "BOOT/A")); err != nil {
		t.Errorf("BOOT was wiped: %v", err)
	}

	if err := RequestWipe([]string{"META"}); err == nil {
		t.Error("RequestWipe accepted META")
	}
}
