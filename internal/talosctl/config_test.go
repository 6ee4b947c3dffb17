package talosctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/talos-go/talos/internal/testenv"
)

func TestConfigPathOrder(t *testing.T) {
	home := isolate(t)
	xdg := filepath.Join(home, "xdg")
	homeCfg := filepath.Join(home, ".talos", "config")
	xdgCfg := filepath.Join(xdg, "talos", "config.yaml")

	check := func(name, flag, want string) {
		t.Helper()

		got, err := ConfigPath(flag)
		if err != nil {
			t.Fatal(err)
		}

		if got != want {
			t.Errorf("%s: got %s, want %s", name, got, want)
		}
	}

	check("nothing exists: default in home", "", homeCfg)

	t.Setenv("XDG_CONFIG_HOME", xdg)
	check("xdg set but missing: home", "", homeCfg)

	testenv.WriteFile(t, xdgCfg, "context: a\n", 0o600)
	check("xdg file exists", "", xdgCfg)

	testenv.WriteFile(t, homeCfg, "context: b\n", 0o600)
	check("xdg wins over home", "", xdgCfg)

	t.Setenv(TalosconfigEnv, "/env/config")
	check("env wins over xdg", "", "/env/config")

	check("flag wins over env", "/flag/config", "/flag/config")
}

func TestConfigMissingFileError(t *testing.T) {
	isolate(t)

	code, _, stderr := run(t, "config", "contexts")
	if code == 0 {
		t.Fatal("expected failure without a talosconfig")
	}

	mustContain(t, stderr, "does not exist", "talosctl gen config")
}

const twoContexts = `context: one
contexts:
    one:
        endpoints:
            - 10.0.0.1
        nodes:
            - 10.0.0.2
            - 10.0.0.3
    two:
        endpoints:
            - 10.1.0.1
`

func TestConfigContextCommands(t *testing.T) {
	home := isolate(t)
	path := filepath.Join(home, ".talos", "config")
	testenv.WriteFile(t, path, twoContexts, 0o600)

	code, out, stderr := run(t, "config", "contexts")
	if code != 0 {
		t.Fatal(stderr)
	}

	golden(t, "config-contexts.txt", out)

	if code, _, stderr = run(t, "config", "context", "two"); code != 0 {
		t.Fatal(stderr)
	}

	if code, _, stderr = run(t, "config", "endpoint", "1.1.1.1", "2.2.2.2,3.3.3.3"); code != 0 {
		t.Fatal(stderr)
	}

	if code, _, stderr = run(t, "config", "node", "4.4.4.4"); code != 0 {
		t.Fatal(stderr)
	}

	cfg := loadFile(t, path)
	if cfg.Context != "two" {
		t.Errorf("current context: got %q", cfg.Context)
	}

	if got := cfg.Contexts["two"].Endpoints; len(got) != 3 || got[2] != "3.3.3.3" {
		t.Errorf("endpoints: got %v", got)
	}

	if got := cfg.Contexts["two"].Nodes; len(got) != 1 || got[0] != "4.4.4.4" {
		t.Errorf("nodes: got %v", got)
	}

	if got := cfg.Contexts["one"].Endpoints; len(got) != 1 || got[0] != "10.0.0.1" {
		t.Errorf("other context changed: %v", got)
	}

	// --context selects the context to edit without switching.
	if code, _, stderr = run(t, "--context", "one", "config", "node", "9.9.9.9"); code != 0 {
		t.Fatal(stderr)
	}

	cfg = loadFile(t, path)
	if cfg.Context != "two" || cfg.Contexts["one"].Nodes[0] != "9.9.9.9" {
		t.Errorf("--context edit: current %q, nodes %v", cfg.Context, cfg.Contexts["one"].Nodes)
	}

	code, _, stderr = run(t, "config", "context", "nope")
	if code == 0 {
		t.Fatal("switching to a missing context must fail")
	}

	mustContain(t, stderr, `context "nope" is not in talosconfig`, "talosctl config contexts")
}

func loadFile(t *testing.T, path string) *clientconfig.Config {
	t.Helper()

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}

	return cfg
}

func TestConfigMergeRenamesClashes(t *testing.T) {
	home := isolate(t)
	path := filepath.Join(home, ".talos", "config")
	testenv.WriteFile(t, path, twoContexts, 0o600)

	other := filepath.Join(home, "other")
	testenv.WriteFile(t, other, "context: one\ncontexts:\n    one:\n        endpoints: [192.168.0.1]\n    three:\n        endpoints: [192.168.0.3]\n", 0o600)

	code, out, stderr := run(t, "config", "merge", other)
	if code != 0 {
		t.Fatal(stderr)
	}

	mustContain(t, out, `renamed talosconfig context "one" -> "one-1"`)

	cfg := loadFile(t, path)
	if cfg.Context != "one-1" {
		t.Errorf("current context after merge: %q, want one-1", cfg.Context)
	}

	if cfg.Contexts["one"].Endpoints[0] != "10.0.0.1" || cfg.Contexts["one-1"].Endpoints[0] != "192.168.0.1" {
		t.Errorf("merge was destructive: one=%v one-1=%v", cfg.Contexts["one"].Endpoints, cfg.Contexts["one-1"].Endpoints)
	}

	if cfg.Contexts["three"] == nil || cfg.Contexts["two"] == nil {
		t.Errorf("contexts missing after merge: %v", cfg.Contexts)
	}

	// A second merge takes the next free index.
	if code, out, _ = run(t, "config", "merge", other); code != 0 || !strings.Contains(out, `"one" -> "one-2"`) || !strings.Contains(out, `"three" -> "three-1"`) {
		t.Errorf("second merge: code %d, out %q", code, out)
	}

	// --force replaces instead.
	if code, out, stderr = run(t, "config", "merge", "--force", other); code != 0 {
		t.Fatal(stderr)
	}

	if out != "" {
		t.Errorf("forced merge renamed: %q", out)
	}

	cfg = loadFile(t, path)
	if cfg.Contexts["one"].Endpoints[0] != "192.168.0.1" || cfg.Context != "one" {
		t.Errorf("forced merge: one=%v current=%q", cfg.Contexts["one"].Endpoints, cfg.Context)
	}
}

func TestConfigMergeIntoMissingFileCreatesIt(t *testing.T) {
	home := isolate(t)
	other := filepath.Join(home, "talosconfig")
	testenv.WriteFile(t, other, twoContexts, 0o600)

	target := filepath.Join(home, "new", "config")
	t.Setenv(TalosconfigEnv, target)

	if code, _, stderr := run(t, "config", "merge", other); code != 0 {
		t.Fatal(stderr)
	}

	cfg := loadFile(t, target)
	if cfg.Context != "one" || len(cfg.Contexts) != 2 {
		t.Errorf("merged into new file: %+v", cfg)
	}
}

func TestConfigAdd(t *testing.T) {
	home := isolate(t)
	ca := filepath.Join(home, "ca.crt")
	testenv.WriteFile(t, ca, "CA", 0o600)

	if code, _, stderr := run(t, "config", "add", "x", "--ca", ca); code != 0 {
		t.Fatal(stderr)
	}

	cfg := loadFile(t, filepath.Join(home, ".talos", "config"))
	if cfg.Contexts["x"] == nil || cfg.Contexts["x"].CA != "Q0E=" || cfg.Context != "x" {
		t.Errorf("added context: %+v", cfg)
	}

	if code, _, stderr := run(t, "config", "add", "x"); code == 0 || !strings.Contains(stderr, "already exists") {
		t.Errorf("adding a duplicate context: code %d stderr %q", code, stderr)
	}
}
