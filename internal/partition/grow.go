package partition

import (
	"fmt"
	"io"
	"os"
)

// mbrBootCode is the MBR's boot code and disk signature, the bytes before its partition
// entries: a table written anew keeps them, or a BIOS-booted disk would not boot again.
const mbrBootCode = 446

// WriteKeepingBootCode is Write on a disk that may boot by BIOS: the MBR's boot code (GRUB's)
// is kept.
func WriteKeepingBootCode(disk *os.File, size int64, parts []Placed) error {
	boot := make([]byte, mbrBootCode)
	if _, err := disk.ReadAt(boot, 0); err != nil {
		return err
	}

	if err := Write(disk, size, parts); err != nil {
		return err
	}

	if _, err := disk.WriteAt(boot, 0); err != nil {
		return err
	}

	return disk.Sync()
}

// GrowLast extends the disk's last partition, which must be the one named name, into the free
// space after it (MiB-aligned, before the backup table; a disk that grew has it), to at most
// limit bytes (0: no bound), as upstream's volumes with provisioning.grow. The table is written
// anew and the kernel told the new size, so the disk's other partitions may stay mounted; the
// filesystem on it is the caller's to grow. It returns the partition's size before and after.
func GrowLast(disk *os.File, name string, limit int64) (before, after int64, err error) {
	size, err := disk.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, 0, err
	}

	parts, err := Read(disk)
	if err != nil {
		return 0, 0, err
	}

	if len(parts) == 0 || parts[len(parts)-1].Name != name {
		return 0, 0, fmt.Errorf("%s is not the last partition of %s: it has no free space after it to grow into", name, disk.Name())
	}

	for i, p := range parts {
		if p.Number != i+1 { // Write numbers the partitions by their place in the slice
			return 0, 0, fmt.Errorf("%s's partition table has a gap before partition %d: it is left as it is", disk.Name(), p.Number)
		}
	}

	last := &parts[len(parts)-1]
	before = last.Bytes()

	ss := last.SectorSize
	align := int64(MiB) / ss
	end := (LastUsable(size, ss)+1)/align*align - 1

	if limit > 0 {
		end = min(end, last.First+limit/ss-1)
	}

	if end <= last.Last {
		return before, before, nil
	}

	last.Last = end
	last.Size = last.Bytes()

	if err = WriteKeepingBootCode(disk, size, parts); err != nil {
		return before, before, err
	}

	if err = ResizeInKernel(disk, *last); err != nil {
		return before, last.Bytes(), err
	}

	return before, last.Bytes(), nil
}
