package metal

import (
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// XFS's ioctls (linux/xfs_fs.h): the geometry (its version 1 layout, which every kernel
// answers) and growing the data section.
const (
	xfsGeomV1Size = 112
	xfsGeometryV1 = 2<<30 | xfsGeomV1Size<<16 | 'X'<<8 | 100 // _IOR('X', 100, struct xfs_fsop_geom_v1)
	xfsGrowData   = 1<<30 | 16<<16 | 'X'<<8 | 110            // _IOW('X', 110, struct xfs_growfs_data)
)

// growXFS grows the XFS mounted at dir to the whole of its device dev, when the device is
// larger (a disk grown since it was made, like a disk image's copy): the EPHEMERAL of a disk
// image is as small as the image until its first boot.
func growXFS(dir, dev string) (bool, error) {
	f, err := os.Open(dev)
	if err != nil {
		return false, err
	}

	size, err := f.Seek(0, io.SeekEnd)
	f.Close()

	if err != nil {
		return false, err
	}

	d, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()

	var geom [xfsGeomV1Size]byte
	if err = ioctl(d, xfsGeometryV1, unsafe.Pointer(&geom)); err != nil {
		return false, fmt.Errorf("reading %s's XFS geometry: %w", dir, err)
	}

	blockSize := *(*uint32)(unsafe.Pointer(&geom[0]))
	imaxpct := *(*uint32)(unsafe.Pointer(&geom[28]))
	blocks := *(*uint64)(unsafe.Pointer(&geom[32]))

	newBlocks := uint64(size) / uint64(blockSize)
	if blockSize == 0 || newBlocks <= blocks+(16<<20)/uint64(blockSize) { // less than 16 MiB to gain
		return false, nil
	}

	grow := struct {
		newBlocks uint64
		imaxpct   uint32
		_         uint32
	}{newBlocks, imaxpct, 0}

	if err = ioctl(d, xfsGrowData, unsafe.Pointer(&grow)); err != nil {
		return false, fmt.Errorf("growing %s's XFS to %d blocks: %w", dir, newBlocks, err)
	}

	return true, nil
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(arg)); errno != 0 {
		return errno
	}

	return nil
}
