package pki_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/talos-go/talos/internal/pki"
)

func read(t *testing.T, path string) string {
	t.Helper()

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	return string(data)
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	return st
}

func TestWriteFilesPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets", "svc")
	order := []string{"server.key", "server.crt", "ca.crt"}
	files := map[string][]byte{"server.key": []byte("key"), "server.crt": []byte("crt"), "ca.crt": []byte("ca")}

	// A folder someone made world-readable and a key readable by all (with the right bytes)
	// both end up private.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(dir, "server.key"), []byte("key"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := pki.WriteFiles(dir, order, files); err != nil {
		t.Fatal(err)
	}

	if m := stat(t, dir).Mode().Perm(); m != 0o700 {
		t.Errorf("folder mode %v, want 0700", m)
	}

	for _, name := range order {
		if m := stat(t, filepath.Join(dir, name)).Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, m)
		}

		if got := read(t, filepath.Join(dir, name)); got != string(files[name]) {
			t.Errorf("%s holds %q", name, got)
		}
	}

	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*")); len(tmp) > 0 {
		t.Errorf("temporary files left behind: %v", tmp)
	}

	// Unchanged files are not replaced; changed ones are.
	before := stat(t, filepath.Join(dir, "ca.crt"))
	files["server.crt"] = []byte("crt2")

	if err := pki.WriteFiles(dir, order, files); err != nil {
		t.Fatal(err)
	}

	if !os.SameFile(before, stat(t, filepath.Join(dir, "ca.crt"))) {
		t.Error("an unchanged file was replaced")
	}

	if got := read(t, filepath.Join(dir, "server.crt")); got != "crt2" {
		t.Errorf("server.crt holds %q after the change", got)
	}
}

func TestWriteFilesIncompleteChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "svc")

	err := pki.WriteFiles(dir, []string{"server.key", "ca.crt"}, map[string][]byte{"server.key": []byte("key")})
	if err == nil {
		t.Fatal("an incomplete set was written")
	}

	if _, err = os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the folder was made for an incomplete set: %v", err)
	}
}

func TestBundle(t *testing.T) {
	got := string(pki.Bundle([]byte("A\n"), nil, []byte("  B"), []byte("A"), []byte("C\n\n")))
	if got != "A\nB\nC\n" {
		t.Errorf("bundle %q, want issuing first, repeats and empties dropped", got)
	}
}
