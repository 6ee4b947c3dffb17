package meta

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestSetGetPersist(t *testing.T) {
	dir := t.TempDir()

	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}

	if v, err := s.Get(ActiveSlot); err != nil || v != "" {
		t.Fatalf("empty store: got %q, %v", v, err)
	}

	if err = s.Set(ActiveSlot, "A", BootOnce, "B"); err != nil {
		t.Fatal(err)
	}

	// A second store on the same folder (another process, or after a reboot) sees the values.
	s2, _ := Open(dir)

	v, err := s2.Read()
	if err != nil {
		t.Fatal(err)
	}

	if v[ActiveSlot] != "A" || v[BootOnce] != "B" {
		t.Fatalf("values not persisted: %v", v)
	}

	// Setting a key to "" removes it.
	if err = s2.Set(BootOnce, ""); err != nil {
		t.Fatal(err)
	}

	data, _ := os.ReadFile(s.Path())
	if strings.Contains(string(data), BootOnce) {
		t.Fatalf("removed key still in file: %q", data)
	}

	if fi, _ := os.Stat(s.Path()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("META file mode %v, want 0600", fi.Mode().Perm())
	}

	// No temporary files are left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

func TestRejectedUpdateChangesNothing(t *testing.T) {
	s, _ := Open(t.TempDir())
	if err := s.Set(ActiveSlot, "A"); err != nil {
		t.Fatal(err)
	}

	if err := s.Set(ActiveSlot, "B\nboot.once=A"); err == nil {
		t.Fatal("a value with a newline was accepted")
	}

	if err := s.Set("odd"); err == nil {
		t.Fatal("odd argument count accepted")
	}

	if v, _ := s.Get(ActiveSlot); v != "A" {
		t.Fatalf("rejected update changed the store: %q", v)
	}
}

func TestDamagedFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, fileName), []byte("boot.active=A\ngarbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s, _ := Open(dir)

	_, err := s.Read()
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("damaged file: got %v, want an error naming line 2", err)
	}
}

func TestConcurrentUpdates(t *testing.T) {
	s, _ := Open(t.TempDir())

	var wg sync.WaitGroup

	for i := 0; i < 20; i++ {
		wg.Add(1)

		go func() {
			defer wg.Done()

			if err := s.Update(func(v Values) error {
				v["n"] += "x"

				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}

	wg.Wait()

	if v, _ := s.Get("n"); len(v) != 20 {
		t.Fatalf("lost updates: %d of 20", len(v))
	}
}
