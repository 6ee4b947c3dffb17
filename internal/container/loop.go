package container

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// attachLoop puts the image on a free loop device, read-only and with autoclear, so the device
// is released when its last mount goes (with the node's mount namespace). The caller closes
// the returned device after mounting it.
func attachLoop(image string) (*os.File, error) {
	img, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("opening node image: %w", err)
	}
	defer img.Close() //nolint:errcheck

	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/loop-control (is the loop module loaded?): %w", err)
	}
	defer ctl.Close() //nolint:errcheck

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

		dev.Close() //nolint:errcheck

		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attaching %s to %s: %w", image, path, err)
		}
	}

	return nil, errors.New("no free loop device after 20 tries")
}
