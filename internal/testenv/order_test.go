package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A package calling KeepOrder runs its tests in source order under -shuffle=on, every time;
// without it the same tests are shuffled (so the check could fail).
func TestKeepOrderUnshuffles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a small module")
	}

	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}

	tests := ""
	for _, n := range []string{"A", "B", "C", "D", "E", "F", "G", "H"} {
		tests += "func Test" + n + "(t *testing.T) { t.Log(\"ran " + n + "\") }\n"
	}

	run := func(keep bool) string {
		t.Helper()

		dir := t.TempDir()
		main := "func TestMain(m *testing.M) { os.Exit(m.Run()) }\n"

		if keep {
			main = "func TestMain(m *testing.M) { testenv.KeepOrder(\"the suite\", \"why\"); os.Exit(m.Run()) }\n"
		}

		src := "package p\n\nimport (\n\t\"os\"\n\t\"testing\"\n\n\t\"github.com/talos-go/talos/internal/testenv\"\n)\n\nvar _ = testenv.InCI\n\n" + main + tests
		WriteFile(t, filepath.Join(dir, "p_test.go"), src, 0o644)

		// In the repository's module, so the package can import testenv ("_": ./... skips it).
		pkg := filepath.Join(repo, "internal", "testenv", "_order-"+filepath.Base(dir))
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { os.RemoveAll(pkg) })

		if err := os.Rename(filepath.Join(dir, "p_test.go"), filepath.Join(pkg, "p_test.go")); err != nil {
			t.Fatal(err)
		}

		cmd := exec.Command("go", "test", "-count=1", "-v", "-shuffle=on", "./"+filepath.Base(pkg))
		cmd.Dir = filepath.Dir(pkg)

		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go test: %v\n%s", err, out)
		}

		var order []string

		for _, l := range strings.Split(string(out), "\n") {
			if after, ok := strings.CutPrefix(strings.TrimSpace(l), "p_test.go:"); ok {
				order = append(order, after[strings.Index(after, "ran ")+4:])
			}
		}

		return strings.Join(order, "")
	}

	if got := run(true); got != "ABCDEFGH" {
		t.Errorf("with KeepOrder: order %q, want ABCDEFGH", got)
	}

	// 8 tests keep their order by chance once in 40320 shuffles.
	if got := run(false); got == "ABCDEFGH" || len(got) != 8 {
		t.Errorf("without KeepOrder: order %q, want the 8 tests shuffled", got)
	}
}
