package atomicfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// entries lists dir's names, so a test sees any temporary file left behind.
func entries(t *testing.T, dir string) []string {
	t.Helper()

	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}

	return names
}

func TestWriteFile(t *testing.T) {
	// The mode is exactly the one asked for, whatever the umask, on a new file and over an
	// old file of another mode.
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })

	for _, tc := range []struct {
		name     string
		old      []byte // nil: no file yet
		oldMode  os.FileMode
		data     []byte
		mode     os.FileMode
		wantMode os.FileMode
	}{
		{name: "new file", data: []byte("machine: {}\n"), mode: 0o644, wantMode: 0o644},
		{name: "replaces, mode changed", old: []byte("old contents, longer than the new\n"), oldMode: 0o644, data: []byte("new\n"), mode: 0o600, wantMode: 0o600},
		{name: "replaces, mode widened", old: []byte("old\n"), oldMode: 0o600, data: []byte("new\n"), mode: 0o640, wantMode: 0o640},
		{name: "empty data", old: []byte("old\n"), oldMode: 0o600, data: []byte{}, mode: 0o600, wantMode: 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.yaml")

			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o600); err != nil {
					t.Fatal(err)
				}

				if err := os.Chmod(path, tc.oldMode); err != nil {
					t.Fatal(err)
				}
			}

			if err := WriteFile(path, tc.data, tc.mode); err != nil {
				t.Fatal(err)
			}

			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			if !bytes.Equal(got, tc.data) {
				t.Errorf("contents %q, want %q", got, tc.data)
			}

			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}

			if st.Mode() != tc.wantMode {
				t.Errorf("mode %v, want %v", st.Mode(), tc.wantMode)
			}

			if names := entries(t, dir); len(names) != 1 || names[0] != "config.yaml" {
				t.Errorf("folder holds %v, want only config.yaml (no temporary file)", names)
			}
		})
	}
}

// A write that fails after the temporary file was made and partly written (the file size limit
// stands for a full disk) leaves the old file as it was and no temporary file.
func TestWriteFileFailsMidway(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	oldData := []byte("version: v1alpha1\nmachine: {}\n")

	if err := os.WriteFile(path, oldData, 0o600); err != nil {
		t.Fatal(err)
	}

	// RLIMIT_FSIZE makes write(2) stop at 4 KiB with EFBIG (Go ignores the SIGXFSZ that comes
	// with it). The limit is the test process's own; it is put back before anything else runs.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}

	small := lim
	small.Cur = 4096

	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &small); err != nil {
		t.Fatal(err)
	}

	err := WriteFile(path, bytes.Repeat([]byte("x"), 64<<10), 0o600)

	if rerr := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); rerr != nil {
		t.Fatal(rerr)
	}

	if !errors.Is(err, unix.EFBIG) {
		t.Fatalf("WriteFile over the size limit: %v, want EFBIG", err)
	}

	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}

	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(got, oldData) {
		t.Errorf("old file now holds %d bytes %.40q, want it intact", len(got), got)
	}

	if names := entries(t, dir); len(names) != 1 || names[0] != "config.yaml" {
		t.Errorf("folder holds %v, want only config.yaml (temporary file removed)", names)
	}
}

// A folder that cannot be written to refuses the write with an error naming the file, and the
// old file stays. Root passes permission checks, so as root the folder is a read-only tmpfs.
func TestWriteFileReadOnlyFolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	oldData := []byte("old\n")

	if os.Geteuid() == 0 {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	}

	if err := os.WriteFile(path, oldData, 0o600); err != nil {
		t.Fatal(err)
	}

	if os.Geteuid() == 0 {
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { os.Chmod(dir, 0o700) })
	}

	err := WriteFile(path, []byte("new\n"), 0o600)
	if err == nil {
		t.Fatal("WriteFile into a read-only folder succeeded")
	}

	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}

	if got, _ := os.ReadFile(path); !bytes.Equal(got, oldData) {
		t.Errorf("old file now holds %q, want %q", got, oldData)
	}

	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("folder holds %v, want only config.yaml", names)
	}
}

func TestRenameAndRemove(t *testing.T) {
	dir := t.TempDir()
	staged := filepath.Join(dir, "config.staged.yaml")
	cfg := filepath.Join(dir, "config.yaml")

	if err := os.WriteFile(staged, []byte("staged\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := Rename(staged, cfg); err != nil {
		t.Fatal(err)
	}

	if got, err := os.ReadFile(cfg); err != nil || string(got) != "staged\n" {
		t.Errorf("after Rename: %q, %v", got, err)
	}

	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("the renamed file is still there: %v", err)
	}

	if err := Rename(staged, cfg); !os.IsNotExist(err) {
		t.Errorf("Rename of a missing file: %v, want not-exist", err)
	}

	if err := Remove(cfg); err != nil {
		t.Fatal(err)
	}

	if _, err := os.Stat(cfg); !os.IsNotExist(err) {
		t.Errorf("the removed file is still there: %v", err)
	}

	if err := Remove(cfg); err != nil {
		t.Errorf("Remove of a missing file: %v, want nil", err)
	}

	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("SyncDir of a missing folder succeeded")
	}
}

// The temporary files a crash left behind are removed; the file, other files and other files'
// temporary files are kept.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	keep := []string{"config.yaml", "config.staged.yaml", ".config.staged.yaml.tmp-1", "config.yaml.tmp-2"}

	for _, name := range append([]string{".config.yaml.tmp-123", ".config.yaml.tmp-456"}, keep...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	if err := RemoveTemps(filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}

	got := entries(t, dir)
	slices.Sort(got)
	slices.Sort(keep)

	if !slices.Equal(got, keep) {
		t.Errorf("folder holds %v, want %v", got, keep)
	}
}
