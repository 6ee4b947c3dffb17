package imager

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// cpio writes a newc ("070701") archive, the initramfs format the kernel unpacks, with every
// time and owner zero and the entries in the order a walk of the unpacked files visits them
// (each folder's names sorted), so that the same files give the same bytes however they were
// added: a node writing its initramfs back from the files the kernel unpacked writes the bytes
// it was built as. The first error sticks.
type cpio struct {
	w       *bufio.Writer
	n       int64 // bytes written, for the 4-byte padding
	err     error
	entries map[string]cpioEntry
}

type cpioEntry struct {
	mode         uint32
	major, minor uint32
	src          string // a regular file's contents: this file's, or data
	data         []byte
	size         int64
}

func newCpio(w *bufio.Writer) *cpio { return &cpio{w: w, entries: map[string]cpioEntry{}} }

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChr  = 0o020000
)

func (c *cpio) add(name string, e cpioEntry) {
	if _, ok := c.entries[name]; ok && e.mode&cpioDir != 0 {
		return // a folder is added once
	}

	c.entries[name] = e
}

// dir adds a folder.
func (c *cpio) dir(name string) { c.add(name, cpioEntry{mode: cpioDir | 0o755}) }

func (c *cpio) device(name string, perm, major, minor uint32) {
	c.add(name, cpioEntry{mode: cpioChr | perm, major: major, minor: minor})
}

func (c *cpio) bytes(name string, b []byte, perm uint32) {
	c.add(name, cpioEntry{mode: cpioFile | perm, data: b, size: int64(len(b))})
}

func (c *cpio) file(name, src string, perm uint32) {
	fi, err := os.Stat(src)
	if err != nil {
		if c.err == nil {
			c.err = err
		}

		return
	}

	c.add(name, cpioEntry{mode: cpioFile | perm, src: src, size: fi.Size()})
}

// walkOrder compares paths as a walk visits them: folder by folder, names sorted, a folder
// before what it holds.
func walkOrder(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

func (c *cpio) header(ino int, name string, mode uint32, size int64, major, minor uint32) {
	nlink := 1
	if mode&cpioDir != 0 {
		nlink = 2
	}

	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
	// rdevminor, namesize, check
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, major, minor, len(name)+1, 0)
	c.write([]byte(h + name + "\x00"))
	c.pad()
}

func (c *cpio) write(b []byte) {
	if c.err != nil {
		return
	}

	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func (c *cpio) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpio) contents(e cpioEntry) {
	if c.err != nil {
		return
	}

	if e.src == "" {
		c.write(e.data)

		return
	}

	f, err := os.Open(e.src)
	if err != nil {
		c.err = err

		return
	}
	defer f.Close()

	n, err := io.Copy(c.w, io.LimitReader(f, e.size))
	c.n += n
	c.err = err

	if err == nil && n != e.size {
		c.err = fmt.Errorf("%s changed while it was archived", e.src)
	}
}

// close writes the entries and the trailer, and flushes.
func (c *cpio) close() error {
	names := make([]string, 0, len(c.entries))
	for name := range c.entries {
		names = append(names, name)
	}

	slices.SortFunc(names, walkOrder)

	for i, name := range names {
		e := c.entries[name]
		c.header(i+1, name, e.mode, e.size, e.major, e.minor)

		if e.mode&cpioFile != 0 {
			c.contents(e)
			c.pad()
		}
	}

	c.header(len(names)+1, "TRAILER!!!", 0, 0, 0, 0)

	if c.err != nil {
		return c.err
	}

	return c.w.Flush()
}

// WriteInitramfs writes the files under root as an uncompressed newc archive: a metal node
// writes its own initramfs to disk from the files the kernel unpacked (folders, regular files,
// character devices; nothing else is in one). Names in skip (relative to root) are left out with
// what they hold: what the boot added to the initramfs's folder.
func WriteInitramfs(w io.Writer, root string, skip ...string) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	c := newCpio(bw)

	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}

		name, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}

		if slices.Contains(skip, name) {
			if d.IsDir() {
				return filepath.SkipDir
			}

			return nil
		}

		fi, err := d.Info()
		if err != nil {
			return err
		}

		perm := uint32(fi.Mode().Perm())

		switch {
		case fi.IsDir():
			c.dir(name)
		case fi.Mode().IsRegular():
			c.file(name, p, perm)
		case fi.Mode()&fs.ModeCharDevice != 0:
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%s: no device numbers", p)
			}

			c.device(name, perm, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		default:
			return fmt.Errorf("%s: %s files do not belong in an initramfs", p, fi.Mode().Type())
		}

		return c.err
	})
	if err != nil {
		return err
	}

	return c.close()
}
