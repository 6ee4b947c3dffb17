package logging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestTailAndFollow(t *testing.T) {
	m, err := NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	w, _ := m.Writer("svc")
	for i := range 10 {
		fmt.Fprintf(w, "line %d\n", i)
	}

	for _, tc := range []struct {
		tail int
		want string
	}{
		{0, ""},
		{2, "line 8\nline 9\n"},
		{-1, "line 0\n"},
		{100, "line 0\n"},
	} {
		var buf bytes.Buffer
		if err := m.Read(context.Background(), "svc", tc.tail, false, func(b []byte) error { buf.Write(b); return nil }); err != nil {
			t.Fatal(err)
		}
		if tc.tail <= 2 && tc.tail >= 0 && buf.String() != tc.want {
			t.Errorf("tail %d: got %q want %q", tc.tail, buf.String(), tc.want)
		}
		if (tc.tail < 0 || tc.tail > 10) && !bytes.HasPrefix(buf.Bytes(), []byte(tc.want)) {
			t.Errorf("tail %d: got %q, want it to start with %q", tc.tail, buf.String(), tc.want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	got := make(chan string, 10)
	go m.Read(ctx, "svc", 1, true, func(b []byte) error { got <- string(b); return nil })

	if s := <-got; s != "line 9\n" {
		t.Fatalf("first chunk %q", s)
	}
	fmt.Fprintf(w, "new\n")
	select {
	case s := <-got:
		if s != "new\n" {
			t.Fatalf("followed chunk %q", s)
		}
	case <-ctx.Done():
		t.Fatal("follow did not deliver the new line")
	}
}

func TestMissingLogAndBadID(t *testing.T) {
	m, _ := NewManager(t.TempDir())
	if err := m.Read(context.Background(), "nope", 10, false, func([]byte) error { return nil }); err == nil {
		t.Fatal("reading a missing log must fail")
	}
	if _, err := m.Writer("../etc"); err == nil {
		t.Fatal("path traversal id accepted")
	}
}

func TestShrinkKeepsNewest(t *testing.T) {
	m, _ := NewManager(t.TempDir())
	w, _ := m.Writer("big")
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	for range MaxSize/1024 + 10 {
		w.Write(line)
	}
	w.Write([]byte("last\n"))

	var buf bytes.Buffer
	m.Read(context.Background(), "big", -1, false, func(b []byte) error { buf.Write(b); return nil })
	if buf.Len() > MaxSize || !bytes.HasSuffix(buf.Bytes(), []byte("last\n")) {
		t.Fatalf("after shrink: %d bytes, suffix ok=%v", buf.Len(), bytes.HasSuffix(buf.Bytes(), []byte("last\n")))
	}
}

// With a console set (the config's debug), each service's lines go there too, prefixed with its
// name; machined's own log (on the console already) does not; nil stops it.
func TestConsole(t *testing.T) {
	m, err := NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	var console bytes.Buffer

	etcd, _ := m.Writer("etcd")
	machined, _ := m.Writer(ConsoleID)

	fmt.Fprint(etcd, "before\n")
	m.SetConsole(&console)
	fmt.Fprint(etcd, "a\nb\n")
	fmt.Fprint(machined, "own line\n")
	m.SetConsole(nil)
	fmt.Fprint(etcd, "after\n")

	if got := console.String(); got != "etcd: a\netcd: b\n" {
		t.Errorf("console: %q", got)
	}

	var file bytes.Buffer
	if err = m.Read(t.Context(), "etcd", -1, false, func(b []byte) error { file.Write(b); return nil }); err != nil || file.String() != "before\na\nb\nafter\n" {
		t.Errorf("the service's log: %q, %v", file.String(), err)
	}
}

// A forward gets every log's lines, machined's own too, without their newlines.
func TestForward(t *testing.T) {
	m, err := NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	var got []string

	m.SetForward(func(id string, line []byte) { got = append(got, id+"|"+string(line)) })

	etcd, _ := m.Writer("etcd")
	machined, _ := m.Writer(ConsoleID)

	fmt.Fprint(etcd, "a\nb\n")
	fmt.Fprint(machined, "own line\n")
	m.SetForward(nil)
	fmt.Fprint(etcd, "after\n")

	if want := []string{"etcd|a", "etcd|b", "machined|own line"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("forwarded %q, want %q", got, want)
	}
}

// As upstream, only a writer registers a log: an unknown ID is refused at once, following or
// not, and leaves nothing behind; a registered log without lines sends nothing, and a follower
// gets its first line; a log written before a restart is still readable.
func TestRegistered(t *testing.T) {
	dir := t.TempDir()

	m, err := NewManager(dir)
	if err != nil {
		t.Fatal(err)
	}

	for _, follow := range []bool{false, true} {
		err = m.Read(t.Context(), "nope", 10, follow, func([]byte) error { return nil })
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `log "nope" was not registered`) {
			t.Fatalf("unknown log, follow %v: %v", follow, err)
		}
	}

	if err = m.Read(t.Context(), "../machined", -1, false, func([]byte) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a path as the ID: %v", err)
	}

	if len(m.logs) != 0 {
		t.Fatalf("reads of unknown logs left %d entries", len(m.logs))
	}

	w, _ := m.Writer("svc")

	if err = m.Read(t.Context(), "svc", -1, false, func(b []byte) error { return fmt.Errorf("sent %q", b) }); err != nil {
		t.Fatalf("registered log without lines: %v", err)
	}

	got := make(chan string, 1)

	go m.Read(t.Context(), "svc", 10, true, func(b []byte) error { got <- string(b); return nil }) // the test's end stops it

	time.Sleep(50 * time.Millisecond) // the follower waits for the file
	fmt.Fprint(w, "first\n")

	select {
	case s := <-got:
		if s != "first\n" {
			t.Fatalf("followed %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower did not get the first line")
	}

	m.Close()

	again, err := NewManager(dir)
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err = again.Read(t.Context(), "svc", -1, false, func(b []byte) error { buf.Write(b); return nil }); err != nil || buf.String() != "first\n" {
		t.Fatalf("a log of before the restart: %q, %v", buf.String(), err)
	}
}
