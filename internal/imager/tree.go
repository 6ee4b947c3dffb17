package imager

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Tree is the content of a root filesystem before it is written: every entry with its mode and
// nothing else. Owners and times are not kept (the squashfs gets root and time 0), so what is in
// the Tree is all that reaches the image's bytes.
type Tree struct {
	entries map[string]treeEntry
}

type treeEntry struct {
	mode   os.FileMode // type bits and permissions
	src    string      // regular file copied from the host
	data   []byte      // regular file with this content
	target string      // symlink target
}

// NewTree returns an empty tree holding only the root folder.
func NewTree() *Tree {
	return &Tree{entries: map[string]treeEntry{"/": {mode: os.ModeDir | 0o755}}}
}

func clean(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("rootfs path %q is not absolute", p)
	}

	return path.Clean(p), nil
}

// put adds an entry and its missing parent folders (0755). An entry may be given again only
// with the same content.
func (t *Tree) put(p string, e treeEntry) error {
	p, err := clean(p)
	if err != nil {
		return err
	}

	if old, ok := t.entries[p]; ok {
		if old.mode != e.mode || old.src != e.src || old.target != e.target || string(old.data) != string(e.data) {
			return fmt.Errorf("rootfs path %s is given twice with different content", p)
		}

		return nil
	}

	if dir := path.Dir(p); dir != p {
		if parent, ok := t.entries[dir]; ok && !parent.mode.IsDir() {
			return fmt.Errorf("rootfs path %s: its parent %s is not a folder", p, dir)
		} else if !ok {
			if err = t.put(dir, treeEntry{mode: os.ModeDir | 0o755}); err != nil {
				return err
			}
		}
	}

	t.entries[p] = e

	return nil
}

// Dir adds a folder.
func (t *Tree) Dir(p string, perm os.FileMode) error {
	return t.put(p, treeEntry{mode: os.ModeDir | perm.Perm() | perm&os.ModeSticky})
}

// File adds a regular file copied from src on the host.
func (t *Tree) File(p, src string, perm os.FileMode) error {
	return t.put(p, treeEntry{mode: perm.Perm(), src: src})
}

// Data adds a regular file with the given content.
func (t *Tree) Data(p string, data []byte, perm os.FileMode) error {
	return t.put(p, treeEntry{mode: perm.Perm(), data: data})
}

// Symlink adds a symbolic link.
func (t *Tree) Symlink(p, target string) error {
	return t.put(p, treeEntry{mode: os.ModeSymlink | 0o777, target: target})
}

// Has tells whether the tree holds p.
func (t *Tree) Has(p string) bool {
	_, ok := t.entries[path.Clean(p)]

	return ok
}

// Paths returns every path of the tree, sorted.
func (t *Tree) Paths() []string {
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}

	slices.Sort(paths)

	return paths
}

// WriteTo writes the tree into dir, which must not exist, in sorted order with the tree's
// modes (the umask does not apply).
func (t *Tree) WriteTo(dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("staging folder %s already exists", dir)
	}

	for _, p := range t.Paths() {
		e := t.entries[p]
		dst := filepath.Join(dir, filepath.FromSlash(p))

		var err error

		switch {
		case e.mode.IsDir():
			err = os.Mkdir(dst, 0o700)
		case e.mode&os.ModeSymlink != 0:
			err = os.Symlink(e.target, dst)
		case e.src != "":
			err = copyFile(e.src, dst)
		default:
			err = os.WriteFile(dst, e.data, 0o600)
		}

		if err == nil && e.mode&os.ModeSymlink == 0 {
			err = os.Chmod(dst, e.mode&(os.ModePerm|os.ModeSticky))
		}

		if err != nil {
			return fmt.Errorf("staging %s: %w", p, err)
		}
	}

	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()

	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}

	if _, err = io.Copy(out, in); err != nil {
		out.Close()

		return err
	}

	return out.Close()
}

// Digest is a sha256 over every entry (path, mode, content or target), in sorted order: two
// trees with the same digest give the same squashfs.
func (t *Tree) Digest() (string, error) {
	h := sha256.New()

	for _, p := range t.Paths() {
		e := t.entries[p]
		content := sha256.Sum256(e.data)

		if e.src != "" {
			sum, _, _, err := digestFile(e.src)
			if err != nil {
				return "", err
			}

			fmt.Fprintf(h, "%s\x00%o\x00%s\x00%s\n", p, uint32(e.mode), e.target, sum)

			continue
		}

		fmt.Fprintf(h, "%s\x00%o\x00%s\x00%x\n", p, uint32(e.mode), e.target, content)
	}

	return hex.EncodeToString(h.Sum(nil)), nil
}

// Size is the total size of the tree's regular files.
func (t *Tree) Size() (int64, error) {
	var n int64

	for _, e := range t.entries {
		switch {
		case e.src != "":
			fi, err := os.Stat(e.src)
			if err != nil {
				return 0, err
			}

			n += fi.Size()
		default:
			n += int64(len(e.data))
		}
	}

	return n, nil
}
