package talosctl

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// run executes talosctl with args in-process, returning the exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()

	var out, errOut bytes.Buffer

	code := Execute(args, &out, &errOut)

	return code, out.String(), errOut.String()
}

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()

	path := filepath.Join("testdata", name)

	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}

		return
	}

	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (create it with go test -run %s -update): %v", t.Name(), err)
	}

	if got != string(want) {
		t.Errorf("output differs from %s (rewrite with -update if intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// isolate points HOME, XDG_CONFIG_HOME and TALOSCONFIG at an empty temporary home.
func isolate(t *testing.T) string {
	t.Helper()

	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv(TalosconfigEnv, "")
	t.Setenv("KUBECONFIG", "")

	return home
}

func mustContain(t *testing.T, s string, parts ...string) {
	t.Helper()

	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("output does not contain %q:\n%s", p, s)
		}
	}
}
