package runtimestats

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// A SIGUSR1 to the process makes it print its goroutine count.
func TestOnSignal(t *testing.T) {
	var out testenv.SyncBuffer

	OnSignal(t.Context(), &out)

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "goroutines=") {
		if time.Now().After(deadline) {
			t.Fatalf("no stats line after SIGUSR1: %q", out.String())
		}

		time.Sleep(10 * time.Millisecond)
	}

	if !strings.HasPrefix(out.String(), Line) {
		t.Fatalf("stats line %q does not start with %q", out.String(), Line)
	}
}
