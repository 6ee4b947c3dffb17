package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs fn against a fatalTB and returns what it failed with, "" when it did not fail.
func failure(t *testing.T, fn func(testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})

	go func() {
		defer close(done)
		fn(f)
	}()
	<-done

	return f.msg
}

func TestWaitForPollsUntilDone(t *testing.T) {
	calls := 0
	WaitFor(t, "third call", time.Minute, func() bool { calls++; return calls == 3 })

	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}

	calls = 0
	WaitFor(t, "no error", time.Minute, func() error {
		if calls++; calls < 2 {
			return errors.New("not yet")
		}

		return nil
	})

	if calls != 2 {
		t.Fatalf("cond called %d times, want 2", calls)
	}
}

func TestWaitForTimeoutSaysWhatAndWhy(t *testing.T) {
	msg := failure(t, func(tb testing.TB) {
		WaitFor(tb, "the moon", 10*time.Millisecond, func() error { return errors.New("still night") })
	})

	if !strings.Contains(msg, "the moon") || !strings.Contains(msg, "still night") {
		t.Fatalf("timeout message %q names neither what was awaited nor the last error", msg)
	}

	if msg = failure(t, func(tb testing.TB) { WaitFor(tb, "done", time.Minute, func() bool { return true }) }); msg != "" {
		t.Fatalf("a cond that holds failed: %s", msg)
	}
}

func TestContextEndsAtTimeout(t *testing.T) {
	ctx := Context(t, 10*time.Millisecond)

	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("context outlived its timeout")
	}

	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("context ended with %v", ctx.Err())
	}
}

func TestWriteFileAndTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "file")
	WriteFile(t, path, "0123456789", 0o640)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", fi.Mode().Perm())
	}

	if got := TailFile(path, 3); got != "789" {
		t.Fatalf("tail of 3: %q", got)
	}

	if got := TailFile(path, 100); got != "0123456789" {
		t.Fatalf("tail longer than the file: %q", got)
	}

	if got := TailFile(path+".missing", 3); !strings.Contains(got, "no such file") {
		t.Fatalf("tail of a missing file: %q", got)
	}
}

func TestLoopbackIsAValidPrefix(t *testing.T) {
	var third int

	got := Loopback(77)
	if _, err := fmt.Sscanf(got, "127.77.%d.", &third); err != nil || third < 1 || third > 250 || !strings.HasSuffix(got, ".") {
		t.Fatalf("Loopback(77) = %q: want 127.77.N. with N in 1..250", got)
	}

	if Loopback(77) != got {
		t.Fatal("Loopback changes within one process")
	}
}
