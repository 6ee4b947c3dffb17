package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary be pause itself, so the tests run the real program.
func TestMain(m *testing.M) {
	if os.Getenv("PAUSE_TEST_MAIN") == "1" {
		main()

		return
	}

	os.Exit(m.Run())
}

// TestPauseExitsOnSignal: pause keeps running until SIGTERM or SIGINT, then exits 0, and a
// SIGCHLD (an exited child) does not stop it.
func TestPauseExitsOnSignal(t *testing.T) {
	if raceEnabled {
		t.Skip("fails under -race only (see race_test.go); run without -race")
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		var out strings.Builder

		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "PAUSE_TEST_MAIN=1")
		cmd.Stdout, cmd.Stderr = &out, &out

		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}

		// Time for pause to reach signal.Notify: a signal before it would kill the process.
		time.Sleep(time.Second)

		if err := cmd.Process.Signal(syscall.SIGCHLD); err != nil {
			t.Fatal(err)
		}

		time.Sleep(100 * time.Millisecond)

		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("pause exited on SIGCHLD: %v %s", err, out.String())
		}

		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}

		if err := cmd.Wait(); err != nil {
			t.Fatalf("after %v: %v (want exit 0) %s", sig, err, out.String())
		}

		if !strings.Contains(out.String(), "shutting down") {
			t.Errorf("output %q", out.String())
		}
	}
}
