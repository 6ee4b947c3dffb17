package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// attachLoop returns a loop device holding the image, read-only and with autoclear, so the
// device is released when its last mount goes (with the last node's mount namespace). Nodes
// booting the same image share one device: the kernel then gives their mounts one squashfs
// superblock, so the image is decompressed once into one page cache for all of them. The
// caller closes the returned device after mounting it.
func attachLoop(image string) (*os.File, error) {
	img, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("opening node image: %w", err)
	}
	defer img.Close()

	if dev := findLoop(img); dev != nil {
		return dev, nil
	}

	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/loop-control (is the loop module loaded?): %w", err)
	}
	defer ctl.Close()

	cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:], image)

	// Another program may take the free device between the two calls: try again.
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("finding a free loop device: %w", err)
		}

		path := fmt.Sprintf("/dev/loop%d", n)
		if _, err = os.Stat(path); errors.Is(err, os.ErrNotExist) {
			if err = unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil {
				return nil, fmt.Errorf("creating %s: %w", path, err)
			}
		}

		dev, err := os.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}

		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}

		dev.Close()

		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attaching %s to %s: %w", image, path, err)
		}
	}

	return nil, errors.New("no free loop device after 20 tries")
}

// findLoop opens a loop device that already holds this image file (same device and inode)
// read-only with autoclear, as attachLoop makes them; nil when there is none.
func findLoop(img *os.File) *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(img.Fd()), &st); err != nil {
		return nil
	}

	devices, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range devices {
		dev, err := os.OpenFile("/dev/"+filepath.Base(filepath.Dir(filepath.Dir(b))), os.O_RDONLY, 0)
		if err != nil {
			continue
		}

		info, err := unix.IoctlLoopGetStatus64(int(dev.Fd()))

		const want = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR
		if err == nil && info.Device == st.Dev && info.Inode == st.Ino && info.Flags&want == want {
			return dev
		}

		dev.Close()
	}

	return nil
}
