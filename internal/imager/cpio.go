package imager

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// cpio writes a newc ("070701") archive, the initramfs format the kernel unpacks, with every
// time and owner zero so that the same files give the same bytes. The first error sticks.
type cpio struct {
	w     *bufio.Writer
	ino   int
	n     int64 // bytes written, for the 4-byte padding
	err   error
	names map[string]bool
}

func newCpio(w *bufio.Writer) *cpio { return &cpio{w: w, names: map[string]bool{}} }

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChr  = 0o020000
)

func (c *cpio) header(name string, mode uint32, size int64, major, minor uint32) {
	if c.err != nil {
		return
	}

	c.ino++
	nlink := 1

	if mode&cpioDir != 0 {
		nlink = 2
	}

	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
	// rdevminor, namesize, check
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, major, minor, len(name)+1, 0)
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

// dir adds a folder once.
func (c *cpio) dir(name string) {
	if c.names[name] {
		return
	}

	c.names[name] = true
	c.header(name, cpioDir|0o755, 0, 0, 0)
}

func (c *cpio) device(name string, perm, major, minor uint32) {
	c.header(name, cpioChr|perm, 0, major, minor)
}

func (c *cpio) bytes(name string, b []byte, perm uint32) {
	c.header(name, cpioFile|perm, int64(len(b)), 0, 0)
	c.write(b)
	c.pad()
}

func (c *cpio) file(name, src string, perm uint32) {
	if c.err != nil {
		return
	}

	f, err := os.Open(src)
	if err != nil {
		c.err = err

		return
	}
	defer f.Close()

	fi, err := f.Stat()
	if err != nil {
		c.err = err

		return
	}

	c.header(name, cpioFile|perm, fi.Size(), 0, 0)

	if c.err != nil {
		return
	}

	n, err := io.Copy(c.w, f)
	c.n += n
	c.err = err
	c.pad()
}

// close writes the trailer and flushes.
func (c *cpio) close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)

	if c.err != nil {
		return c.err
	}

	return c.w.Flush()
}

// WriteInitramfs writes the files under root as an uncompressed newc archive: a metal node
// writes its own initramfs to disk from the files the kernel unpacked (folders, regular files,
// character devices; nothing else is in one).
func WriteInitramfs(w io.Writer, root string) error {
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
