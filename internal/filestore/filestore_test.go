package filestore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReloadOnChangeKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "v")
	os.WriteFile(path, []byte("one"), 0o600)

	loads := 0
	s, err := New(dir, []string{"v"}, func(dir string) (string, error) {
		loads++
		b, err := os.ReadFile(filepath.Join(dir, "v"))
		if string(b) == "bad" {
			return "", errors.New("bad content")
		}
		return string(b), err
	})
	if err != nil || s.Current() != "one" {
		t.Fatalf("%v %q", err, s.Current())
	}

	if reloaded, _ := s.Reload(); reloaded || loads != 1 {
		t.Fatal("reloaded unchanged files")
	}

	os.WriteFile(path, []byte("bad"), 0o600)
	os.Chtimes(path, time.Now().Add(time.Second), time.Now().Add(time.Second))

	if _, err = s.Reload(); err == nil || s.Current() != "one" {
		t.Fatalf("bad files: err %v, current %q", err, s.Current())
	}

	os.WriteFile(path, []byte("two"), 0o600)
	os.Chtimes(path, time.Now().Add(2*time.Second), time.Now().Add(2*time.Second))

	if reloaded, err := s.Reload(); !reloaded || err != nil || s.Current() != "two" {
		t.Fatalf("changed files: %v %v %q", reloaded, err, s.Current())
	}
}
