package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/sandbox"
)

// The test binary doubles as the confined child: with SANDBOX_TEST_READ set it tries to read
// each listed path and to write SANDBOX_TEST_WRITE, and prints what happened.
func TestMain(m *testing.M) {
	if paths := os.Getenv("SANDBOX_TEST_READ"); paths != "" {
		for _, p := range strings.Split(paths, ":") {
			_, err := os.ReadFile(p)
			fmt.Printf("read %s: %v\n", filepath.Base(p), err)
		}

		err := os.WriteFile(os.Getenv("SANDBOX_TEST_WRITE"), []byte("x"), 0o600)
		fmt.Printf("write: %v\n", err)

		os.Exit(0)
	}

	os.Exit(m.Run())
}

func TestConfinedChild(t *testing.T) {
	if sandbox.ABI() == 0 {
		t.Skip("no Landlock in this kernel: nothing to confine with")
	}

	allowed, denied := t.TempDir(), t.TempDir()
	mine, secret := filepath.Join(allowed, "mine"), filepath.Join(denied, "secret")

	for _, f := range []string{mine, secret} {
		if err := os.WriteFile(f, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(self)
	cmd.Env = []string{"SANDBOX_TEST_READ=" + mine + ":" + secret, "SANDBOX_TEST_WRITE=" + filepath.Join(allowed, "new")}

	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out

	exited, err := sandbox.Start(cmd, sandbox.System.Merge(sandbox.Policy{ReadOnly: []string{allowed}, Exec: []string{self}}))
	if err != nil {
		t.Fatal(err)
	}

	if err = <-exited; err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}

	got := out.String()
	for _, want := range []string{"read mine: <nil>", "read secret: open " + secret + ": permission denied", "write: open " + filepath.Join(allowed, "new") + ": permission denied"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in the child's report:\n%s", want, got)
		}
	}

	// The confinement stayed with the child: this process still reads the other folder.
	if _, err := os.ReadFile(secret); err != nil {
		t.Fatalf("the parent was confined too: %v", err)
	}

	// Many starts: each one on a fresh thread, none leaking into the parent's threads.
	for range 5 {
		c := exec.Command(self)
		c.Env = []string{"SANDBOX_TEST_READ=" + secret, "SANDBOX_TEST_WRITE=/nonexistent/x"}

		exited, err := sandbox.Start(c, sandbox.System.Merge(sandbox.Policy{Exec: []string{self}}))
		if err != nil {
			t.Fatal(err)
		}

		if err := <-exited; err != nil {
			t.Fatal(err)
		}

		if _, err := os.ReadFile(secret); err != nil {
			t.Fatalf("the parent was confined: %v", err)
		}
	}
}

func TestStartFailure(t *testing.T) {
	if sandbox.ABI() == 0 {
		t.Skip("no Landlock in this kernel")
	}

	if _, err := sandbox.Start(exec.Command("/nonexistent/binary"), sandbox.System); err == nil {
		t.Fatal("starting a missing binary must fail")
	}
}
