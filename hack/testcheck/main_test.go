package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A real `go test -json` run of a small module: a pass, an allowed skip, a skip nobody allowed
// and a failure. The checker passes only what a careful reader would.
func TestCheckerOnARealRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write("go.mod", "module example.com/m\n\ngo 1.24\n")
	write("m_test.go", `package m

import (
	"os"
	"testing"
)

func TestPass(t *testing.T) {}

func TestAllowedSkip(t *testing.T) { t.Skip("the host has no widget") }

func TestOtherSkip(t *testing.T) {
	t.Run("sub", func(t *testing.T) {
		if os.Getenv("SKIP_SUB") != "" {
			t.Skip("forgot to install the tool")
		}
	})
}

func TestFail(t *testing.T) {
	if os.Getenv("FAIL") != "" {
		t.Fatal("it broke")
	}
}
`)

	goTest := func(env ...string) []byte {
		cmd := exec.Command("go", "test", "-count=1", "-json", "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, _ := cmd.Output() // a failing run exits 1; its JSON is what matters

		return out
	}

	allow, err := parseAllowList(strings.NewReader("# comment\n\nm TestAllowedSkip the widget is optional here\n"), "skips.txt")
	if err != nil {
		t.Fatal(err)
	}

	// The allow list names packages relative to our module; this module's path is its own.
	allow["example.com/m TestAllowedSkip"] = allow["m TestAllowedSkip"]

	check := func(json []byte) (int, string) {
		var out bytes.Buffer
		code := run(bytes.NewReader(json), &out, allow)

		return code, out.String()
	}

	if code, out := check(goTest()); code != 0 || !strings.Contains(out, "allowed     example.com/m TestAllowedSkip: m_test.go:10: the host has no widget (why: the widget is optional here)") || !strings.Contains(out, "ok  \texample.com/m") {
		t.Errorf("an allowed skip: exit %d, want 0, the skip with its reason and why, and the ok line:\n%s", code, out)
	}

	if code, out := check(goTest("SKIP_SUB=1")); code != 1 || !strings.Contains(out, "NOT ALLOWED example.com/m TestOtherSkip/sub: m_test.go:15: forgot to install the tool") {
		t.Errorf("a subtest skipped for an unlisted reason: exit %d, want 1 and the subtest named:\n%s", code, out)
	}

	if code, out := check(goTest("FAIL=1")); code != 1 || !strings.Contains(out, "it broke") {
		t.Errorf("a failed test: exit %d, want 1 and its output:\n%s", code, out)
	}

	// A run cut short: the package started but never finished.
	full := goTest()
	cut := full[:bytes.Index(full, []byte(`"Action":"pass","Package":"example.com/m","Elapsed"`))]
	cut = cut[:bytes.LastIndexByte(cut[:len(cut)-1], '\n')+1]

	if code, out := check(cut); code != 1 || !strings.Contains(out, "example.com/m never finished") {
		t.Errorf("a run cut short: exit %d, want 1 and the unfinished package:\n%s", code, out)
	}

	// A package that does not build.
	write("broken.go", "package m\n\nfunc broken() int { return \"\" }\n")

	if code, out := check(goTest()); code != 1 || !strings.Contains(out, "did not build") {
		t.Errorf("a build failure: exit %d, want 1 and the package named:\n%s", code, out)
	}
}

func TestAllowListNeedsAWhy(t *testing.T) {
	if _, err := parseAllowList(strings.NewReader("internal/x TestY\n"), "skips.txt"); err == nil || !strings.Contains(err.Error(), "skips.txt:1") {
		t.Errorf("an allowed skip without a why: %v, want an error naming the line", err)
	}
}
