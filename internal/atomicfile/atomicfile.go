// Package atomicfile replaces files so that a power loss leaves either the old or the new
// contents, never an empty or partial file: the one way the node writes what must survive a
// crash (machine config, META, node identity, KubeSpan identity, PKI files, the boot menu).
//
// The data goes to a temporary file in the same folder, which is synced, renamed over the
// target, and then the folder itself is synced. The first sync orders the data before the
// rename (without it, a journaling filesystem may commit the rename while the data blocks are
// still only in the page cache, leaving an empty file after a crash); the folder sync makes the
// rename itself durable, so a caller told "written" never sees the old file after a reboot.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode perm (exactly: the umask does not apply). On error
// path is left as it was and no temporary file is left behind (a crash can leave one, named
// ".<name>.tmp-*", which no reader looks at and RemoveTemps clears).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)

	f, err := os.CreateTemp(dir, tempPrefix(path))
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}

	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)

		return fmt.Errorf("writing %s: %w", path, err)
	}

	if err = f.Chmod(perm); err != nil {
		return fail(err)
	}

	if _, err = f.Write(data); err != nil {
		return fail(err)
	}

	if err = f.Sync(); err != nil {
		return fail(err)
	}

	if err = f.Close(); err != nil {
		os.Remove(tmp)

		return fmt.Errorf("writing %s: %w", path, err)
	}

	if err = os.Rename(tmp, path); err != nil {
		os.Remove(tmp)

		return fmt.Errorf("writing %s: %w", path, err)
	}

	return SyncDir(dir)
}

// Rename renames oldpath to newpath in the same folder and makes the rename durable.
func Rename(oldpath, newpath string) error {
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}

	return SyncDir(filepath.Dir(newpath))
}

// Remove removes path, if it exists, and makes the removal durable: a file that must not come
// back after a crash (a staged config superseded by an applied one).
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		if os.IsNotExist(err) {
			return nil
		}

		return err
	}

	return SyncDir(filepath.Dir(path))
}

// RemoveTemps removes the temporary files that writes of path cut short by a crash left
// behind. Only for a time no write of path can be in progress (a boot, before the writers
// start): it would remove a running write's file.
func RemoveTemps(path string) error {
	temps, err := filepath.Glob(filepath.Join(filepath.Dir(path), tempPrefix(path)+"*"))
	if err != nil {
		return err
	}

	for _, tmp := range temps {
		if err = os.Remove(tmp); err != nil && !os.IsNotExist(err) {
			return err
		}
	}

	return nil
}

func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// SyncDir makes a rename, creation or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing folder %s: %w", dir, err)
	}
	defer d.Close()

	if err = d.Sync(); err != nil {
		return fmt.Errorf("syncing folder %s: %w", dir, err)
	}

	return nil
}
