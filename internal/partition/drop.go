package partition

import (
	"encoding/binary"
	"errors"
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
	ss := int64(0)

	for _, size := range []int64{SectorSize, SectorSize4K} {
		b := make([]byte, 8)
		if _, err := disk.ReadAt(b, size); err == nil && string(b) == "EFI PART" {
			ss = size

			break
		}
	}

	if ss == 0 {
		return errors.New("no GUID partition table")
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

// gptTable is one copy of a GPT: its header sector and its entries.
type gptTable struct {
	header, entries []byte
	count, size     int
}

func readTable(disk io.ReaderAt, lba, ss int64) (*gptTable, error) {
	h := make([]byte, ss)
	if _, err := disk.ReadAt(h, lba*ss); err != nil {
		return nil, err
	}

	hs := binary.LittleEndian.Uint32(h[12:])
	if string(h[:8]) != "EFI PART" || hs < 92 || int64(hs) > ss {
		return nil, fmt.Errorf("no GPT header at sector %d", lba)
	}

	check := append([]byte(nil), h[:hs]...)
	binary.LittleEndian.PutUint32(check[16:], 0)

	if crc32.ChecksumIEEE(check) != binary.LittleEndian.Uint32(h[16:]) {
		return nil, errors.New("header checksum mismatch")
	}

	n, size := int(binary.LittleEndian.Uint32(h[80:])), int(binary.LittleEndian.Uint32(h[84:]))
	if n == 0 || n > 1024 || size < entrySize || size > 4096 {
		return nil, fmt.Errorf("%d entries of %d bytes", n, size)
	}

	t := &gptTable{header: h, entries: make([]byte, n*size), count: n, size: size}
	if _, err := disk.ReadAt(t.entries, int64(binary.LittleEndian.Uint64(h[72:]))*ss); err != nil {
		return nil, err
	}

	if crc32.ChecksumIEEE(t.entries) != binary.LittleEndian.Uint32(h[88:]) {
		return nil, errors.New("partition entries checksum mismatch")
	}

	return t, nil
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
