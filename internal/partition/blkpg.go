package partition

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AddToKernel tells the kernel of one new partition of the disk (BLKPG): unlike re-reading the
// whole table, it works while the disk's other partitions are mounted.
func AddToKernel(disk *os.File, p Placed) error {
	return blkpg(disk, unix.BLKPG_ADD_PARTITION, p, "adding")
}

// ResizeInKernel tells the kernel a partition's new size (BLKPG), as AddToKernel does a new one.
func ResizeInKernel(disk *os.File, p Placed) error {
	return blkpg(disk, unix.BLKPG_RESIZE_PARTITION, p, "resizing")
}

func blkpg(disk *os.File, op int32, p Placed, what string) error {
	part := unix.BlkpgPartition{Start: p.Offset(), Length: p.Bytes(), Pno: int32(p.Number)}
	arg := unix.BlkpgIoctlArg{Op: op, Datalen: int32(unsafe.Sizeof(part)), Data: (*byte)(unsafe.Pointer(&part))}

	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, disk.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); errno != 0 {
		return fmt.Errorf("%s partition %d in the kernel's view of %s: %w", what, p.Number, disk.Name(), errno)
	}

	return nil
}
