package uservolume

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/udev"
)

// swapMagic ends a swap header's first page (version 1, the kernel's only one since 2.5).
const swapMagic = "SWAPSPACE2"

// swap makes the device swap space when it is blank (never over data) and enables it.
func swap(dev, label string, res *Result, env Env) error {
	probed, err := udev.Probe(dev)
	if err != nil {
		return err
	}

	switch {
	case probed.Filesystem == "" && isBlank(dev):
		env.Log("making %s (%s) swap space", label, dev)

		if err = formatSwap(dev, label, uuid.New()); err != nil {
			return err
		}

		if probed, err = udev.Probe(dev); err != nil {
			return err
		}
	case probed.Filesystem != "swap":
		return fmt.Errorf("partition %s holds %q, not swap: it is left alone (wipe it to have it made swap)", res.Partition, probed.Filesystem)
	}

	res.UUID = probed.UUID

	return swapOn(dev)
}

// formatSwap writes a swap header on the device, as mkswap does: in its first page, after the
// boot block's 1024 bytes, version 1, the last page, no bad pages, the UUID and the label; the
// magic ends the page.
func formatSwap(dev, label string, id uuid.UUID) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()

	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}

	page := int64(os.Getpagesize())
	if size < 10*page {
		return fmt.Errorf("%s: %d bytes are too few for swap space", dev, size)
	}

	h := make([]byte, page)
	binary.LittleEndian.PutUint32(h[1024:], 1)                   // version
	binary.LittleEndian.PutUint32(h[1028:], uint32(size/page-1)) // last page
	copy(h[1036:1052], id[:])                                    // UUID
	copy(h[1052:1068], label[:min(len(label), 16)])              // label
	copy(h[page-int64(len(swapMagic)):], swapMagic)

	if _, err = f.WriteAt(h, 0); err != nil {
		return err
	}

	return f.Sync()
}

// swapOn enables swapping on the device; swap already enabled there (an earlier try) is fine.
func swapOn(dev string) error {
	p, err := unix.BytePtrFromString(dev)
	if err != nil {
		return err
	}

	if _, _, errno := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0, 0); errno != 0 && !errors.Is(errno, unix.EBUSY) {
		return fmt.Errorf("swapon %s: %w", dev, errno)
	}

	return nil
}
