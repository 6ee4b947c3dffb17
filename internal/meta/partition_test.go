package meta

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func partitionFile(t *testing.T) string {
	t.Helper()

	path := filepath.Join(t.TempDir(), "meta.raw")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	return path
}

// A fresh (zeroed) partition is an empty store; writes alternate between the halves and the
// newest copy is read.
func TestPartitionStore(t *testing.T) {
	path := partitionFile(t)
	s := OpenPartition(path)

	v, err := s.Read()
	if err != nil || len(v) != 0 {
		t.Fatalf("a zeroed partition: %v, %v", v, err)
	}

	for i, slot := range []string{"A", "B", "A"} {
		if err = s.Set(ActiveSlot, slot, "n", strings.Repeat("x", i+1)); err != nil {
			t.Fatal(err)
		}

		if got, _ := s.Get(ActiveSlot); got != slot {
			t.Fatalf("write %d: active slot %q, want %s", i, got, slot)
		}
	}

	// Another store on the same partition reads the same values.
	if got, _ := OpenPartition(path).Get("n"); got != "xxx" {
		t.Errorf("n = %q, want xxx", got)
	}
}

// A write cut short (the newest copy damaged) leaves the previous copy, which is read; damage to
// both copies is an error, not an empty store.
func TestPartitionStoreSurvivesATornWrite(t *testing.T) {
	path := partitionFile(t)
	s := OpenPartition(path)

	for _, slot := range []string{"A", "B"} { // A in the first half, B in the second
		if err := s.Set(ActiveSlot, slot); err != nil {
			t.Fatal(err)
		}
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	if _, err = f.WriteAt([]byte("boot.active=X"), 512<<10+partitionHeader); err != nil {
		t.Fatal(err)
	}

	if got, err := s.Get(ActiveSlot); err != nil || got != "A" {
		t.Fatalf("after a torn write: %q, %v; want the previous copy's A", got, err)
	}

	// The next write goes over the damaged half.
	if err = s.Set(ActiveSlot, "B"); err != nil {
		t.Fatal(err)
	}

	if got, _ := s.Get(ActiveSlot); got != "B" {
		t.Fatalf("after rewriting: %q", got)
	}

	for _, off := range []int64{partitionHeader, 512<<10 + partitionHeader} {
		if _, err = f.WriteAt([]byte("garbage!"), off); err != nil {
			t.Fatal(err)
		}
	}

	if _, err = s.Read(); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("both copies damaged: %v", err)
	}
}

// Open takes a block device for the partition store: a loop device here.
func TestOpenBlockDevice(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a loop device needs root")
	}

	path := partitionFile(t)

	out, err := exec.Command("losetup", "--find", "--show", path).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: %v: %s", err, out)
	}

	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })

	s, err := Open(loop)
	if err != nil {
		t.Fatal(err)
	}

	if s.Path() != loop {
		t.Fatalf("the store on %s is at %s", loop, s.Path())
	}

	if err = s.Set(ActiveSlot, "B"); err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(string(b[:4096]), "boot.active=B") {
		t.Error("the value is not on the partition")
	}
}
