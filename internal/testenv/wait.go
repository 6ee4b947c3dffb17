package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Context is cancelled when the test ends or after timeout, whichever comes first: a guard
// against hangs, never a measure of speed.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)

	return ctx
}

// Cond is what WaitFor polls: done when it returns true, or nil (whose last error a timeout
// reports).
type Cond interface {
	func() bool | func() error
}

// pollInterval is short next to the seconds a node takes to change state.
const pollInterval = 100 * time.Millisecond

// WaitFor polls cond until it is done and fails the test when timeout passes first; the
// timeout only guards against a hang.
func WaitFor[C Cond](t testing.TB, what string, timeout time.Duration, cond C) {
	t.Helper()

	check := func() error {
		switch c := any(cond).(type) {
		case func() bool:
			if !c() {
				return errors.New("not yet")
			}

			return nil
		case func() error:
			return c()
		}

		panic("unreachable")
	}

	deadline := time.Now().Add(timeout)

	for {
		err := check()
		if err == nil {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}

		time.Sleep(pollInterval)
	}
}

// TailFile returns the last n bytes of the file at path, or what reading it failed with.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}

	return tail(string(data), n)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}

	return s
}

// WriteFile writes content to path with mode, creating the parent folders (0700).
func WriteFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()

	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// Loopback returns a 127.second.X. prefix that is X = pid%250+1 for this test process, so
// concurrent runs of one suite do not share addresses.
func Loopback(second int) string {
	return fmt.Sprintf("127.%d.%d.", second, os.Getpid()%250+1)
}
