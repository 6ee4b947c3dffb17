package runtimestats

import (
	"bytes"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.b.String()
}

// A SIGUSR1 to the process makes it print its goroutine count.
func TestOnSignal(t *testing.T) {
	var out syncBuffer

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
