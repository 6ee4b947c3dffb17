package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/sandbox"
	"github.com/talos-go/talos/internal/testenv"
)

func TestProcessOutputAndExitCode(t *testing.T) {
	var out testenv.SyncBuffer
	p := &Process{Args: []string{"/bin/sh", "-c", "echo hello; echo err >&2; exit 3"}, Output: &out}
	err := p.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("want exit status 3, got %v", err)
	}
	if !strings.Contains(out.String(), "hello") || !strings.Contains(out.String(), "err") {
		t.Fatalf("output not captured: %q", out.String())
	}
}

func TestProcessGracefulStop(t *testing.T) {
	var out testenv.SyncBuffer
	p := &Process{
		Args:   []string{"/bin/sh", "-c", "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 0.05; done"},
		Output: &out, GracefulTimeout: 5 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for !strings.Contains(out.String(), "ready") {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "got-term") {
		t.Fatalf("process did not get SIGTERM: %q", out.String())
	}
}

func TestProcessKilledAfterTimeout(t *testing.T) {
	var out testenv.SyncBuffer
	p := &Process{
		Args:   []string{"/bin/sh", "-c", "trap '' TERM; echo ready; while true; do sleep 0.05; done"},
		Output: &out, GracefulTimeout: 100 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for !strings.Contains(out.String(), "ready") {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("process ignoring SIGTERM was not killed")
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatal("SIGKILL came before the graceful timeout")
	}
}

// TimerSlack reaches the child (and every thread it starts), confined or not.
func TestProcessTimerSlack(t *testing.T) {
	for _, sandboxed := range []bool{false, true} {
		var out testenv.SyncBuffer

		p := &Process{Args: []string{"/bin/cat", "/proc/self/timerslack_ns"}, Output: &out, TimerSlack: 3 * time.Millisecond}
		if sandboxed {
			policy := sandbox.System.Merge(sandbox.Policy{Exec: []string{"/bin", "/usr/bin"}})
			p.Sandbox = &policy
		}

		if err := p.Run(context.Background()); err != nil {
			t.Fatalf("sandboxed=%v: %v (output %q)", sandboxed, err, out.String())
		}

		if got := strings.TrimSpace(out.String()); !strings.HasSuffix(got, "3000000") {
			t.Fatalf("sandboxed=%v: child's timer slack %q, want 3000000", sandboxed, got)
		}
	}
}
