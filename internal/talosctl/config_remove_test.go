package talosctl

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/talos-go/talos/internal/testenv"
)

const fourContexts = `context: one
contexts:
    one: {endpoints: [10.0.0.1]}
    test-a: {endpoints: [10.1.0.1]}
    test-b: {endpoints: [10.2.0.1]}
    other: {endpoints: [10.3.0.1]}
`

// runIn runs talosctl with stdin.
func runIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()

	var stderr bytes.Buffer

	root := NewRootCommand()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&stderr)

	err := root.Execute()

	return stderr.String(), err
}

func contextNames(t *testing.T, path string) []string {
	t.Helper()

	cfg, err := clientconfig.Open(path)
	if err != nil {
		t.Fatal(err)
	}

	return slices.Sorted(maps.Keys(cfg.Contexts))
}

func TestConfigRemove(t *testing.T) {
	home := isolate(t)
	path := filepath.Join(home, ".talos", "config")
	testenv.WriteFile(t, path, fourContexts, 0o600)

	// Dry run: asked and answered, nothing saved.
	if _, err := runIn(t, "", "config", "remove", "test-*", "-y", "--dry-run"); err != nil {
		t.Fatal(err)
	}

	if got := contextNames(t, path); len(got) != 4 {
		t.Fatalf("dry run removed contexts: %v", got)
	}

	// Prompted: yes to test-a, no to test-b.
	stderr, err := runIn(t, "y\nn\n", "config", "remove", "test-*")
	if err != nil {
		t.Fatal(err)
	}

	mustContain(t, stderr, `remove context "test-a"? [y/N]`, `remove context "test-b"?`)

	if got := contextNames(t, path); !slices.Equal(got, []string{"one", "other", "test-b"}) {
		t.Fatalf("after prompts: %v", got)
	}

	// The current context is skipped even with -y.
	stderr, err = runIn(t, "", "config", "remove", "o*", "-y")
	if err != nil {
		t.Fatal(err)
	}

	mustContain(t, stderr, `skipping removal of current context "one"`, `removing context "other"`)

	if got := contextNames(t, path); !slices.Equal(got, []string{"one", "test-b"}) {
		t.Fatalf("after -y: %v", got)
	}

	if _, err = runIn(t, "", "config", "remove", "nope", "-y"); err == nil || !strings.Contains(err.Error(), `matches "nope"`) {
		t.Errorf("no match: %v", err)
	}
}
