package uservolume

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/partition"
)

// addPartition tells the kernel of one new partition of the disk (BLKPG): unlike re-reading the
// whole table, it works while the disk's other partitions are mounted.
func addPartition(disk *os.File, p partition.Placed) error {
	part := unix.BlkpgPartition{Start: p.Offset(), Length: p.Bytes(), Pno: int32(p.Number)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_ADD_PARTITION, Datalen: int32(unsafe.Sizeof(part)), Data: (*byte)(unsafe.Pointer(&part))}

	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, disk.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); errno != 0 {
		return fmt.Errorf("adding partition %d to the kernel's view of %s: %w", p.Number, disk.Name(), errno)
	}

	return nil
}
