package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/google/uuid"
)

// Drop removes partition number (1-based, as the kernel numbers it) from a disk's primary and
// backup GPT, leaving the other entries, their numbers and the disk's GUID as they were. Both
// tables are checked before either is written.
func Drop(disk interface {
	io.ReaderAt
	io.WriterAt
}, number int,
) error {
	ss, err := sectorSize(disk)
	if err != nil {
		return err
	}

	primary, err := readTable(disk, 1, ss)
	if err != nil {
		return fmt.Errorf("the primary GPT: %w", err)
	}

	backup, err := readTable(disk, int64(binary.LittleEndian.Uint64(primary.header[32:])), ss)
	if err != nil {
		return fmt.Errorf("the backup GPT: %w", err)
	}

	for _, t := range []*gptTable{primary, backup} {
		if number < 1 || number > t.count {
			return fmt.Errorf("no partition %d: the table has %d entries", number, t.count)
		}

		e := t.entries[(number-1)*t.size : number*t.size]
		if getGUID(e) == uuid.Nil {
			return fmt.Errorf("no partition %d in the table", number)
		}

		clear(e)
	}

	for _, t := range []*gptTable{primary, backup} {
		if err = t.write(disk, ss); err != nil {
			return err
		}
	}

	return nil
}

// write writes the entries, then the header with both checksums updated.
func (t *gptTable) write(disk io.WriterAt, ss int64) error {
	h := t.header
	binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(t.entries))
	binary.LittleEndian.PutUint32(h[16:], 0)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:binary.LittleEndian.Uint32(h[12:])]))

	if _, err := disk.WriteAt(t.entries, int64(binary.LittleEndian.Uint64(h[72:]))*ss); err != nil {
		return fmt.Errorf("writing the partition table: %w", err)
	}

	if _, err := disk.WriteAt(h, int64(binary.LittleEndian.Uint64(h[24:]))*ss); err != nil {
		return fmt.Errorf("writing the partition table: %w", err)
	}

	return nil
}
