package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// On a metal node's META partition the store is two copies, one per half of the partition, each
// a header (magic, sequence number, length, CRC-32 of the data) and the "key=value" lines. A write
// goes to the half not holding the newest copy, so a crash mid-write leaves the newest one whole;
// a read takes the valid copy with the highest sequence number. A partition of zeros (a fresh
// install) is an empty store.

const (
	partitionMagic  = "TGOMETA1"
	partitionHeader = 24 // magic, sequence (8), length (4), CRC-32 (4)
)

type partitionCopy struct {
	seq   uint64
	data  []byte
	valid bool
	used  bool // not zeros: something was written there
}

func readPartitionCopy(r io.ReaderAt, off, half int64) (partitionCopy, error) {
	h := make([]byte, partitionHeader)
	if _, err := r.ReadAt(h, off); err != nil {
		return partitionCopy{}, err
	}

	c := partitionCopy{used: !bytes.Equal(h, make([]byte, partitionHeader))}
	if string(h[:8]) != partitionMagic {
		return c, nil
	}

	n := int64(binary.LittleEndian.Uint32(h[16:]))
	if n > half-partitionHeader {
		return c, nil
	}

	data := make([]byte, n)
	if _, err := r.ReadAt(data, off+partitionHeader); err != nil {
		return partitionCopy{}, err
	}

	if crc32.ChecksumIEEE(data) != binary.LittleEndian.Uint32(h[20:]) {
		return c, nil
	}

	c.seq, c.data, c.valid = binary.LittleEndian.Uint64(h[8:]), data, true

	return c, nil
}

// readPartition returns both copies and the size of a half.
func readPartition(f *os.File) ([2]partitionCopy, int64, error) {
	var copies [2]partitionCopy

	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return copies, 0, err
	}

	half := size / 2
	if half < 4096 {
		return copies, 0, fmt.Errorf("META partition %s is %d bytes: too small for the store", f.Name(), size)
	}

	for i := range copies {
		if copies[i], err = readPartitionCopy(f, int64(i)*half, half); err != nil {
			return copies, 0, fmt.Errorf("reading META %s: %w", f.Name(), err)
		}
	}

	return copies, half, nil
}

func newest(copies [2]partitionCopy) int {
	switch {
	case copies[0].valid && (!copies[1].valid || copies[0].seq >= copies[1].seq):
		return 0
	case copies[1].valid:
		return 1
	}

	return -1
}

func (s *Store) readPartitionLocked(f *os.File) (Values, error) {
	copies, _, err := readPartition(f)
	if err != nil {
		return nil, err
	}

	i := newest(copies)
	if i < 0 {
		if copies[0].used || copies[1].used {
			return nil, fmt.Errorf("META partition %s holds no valid copy of the store: it is damaged (wipe it to start over)", s.dev)
		}

		return Values{}, nil
	}

	return Parse(copies[i].data)
}

func (s *Store) writePartitionLocked(f *os.File, data []byte) error {
	copies, half, err := readPartition(f)
	if err != nil {
		return err
	}

	if int64(len(data)) > half-partitionHeader {
		return fmt.Errorf("META holds %d bytes at most: %d is too much", half-partitionHeader, len(data))
	}

	target, seq := 0, uint64(1)
	if i := newest(copies); i >= 0 {
		target, seq = 1-i, copies[i].seq+1
	}

	buf := make([]byte, partitionHeader+len(data))
	copy(buf, partitionMagic)
	binary.LittleEndian.PutUint64(buf[8:], seq)
	binary.LittleEndian.PutUint32(buf[16:], uint32(len(data)))
	binary.LittleEndian.PutUint32(buf[20:], crc32.ChecksumIEEE(data))
	copy(buf[partitionHeader:], data)

	if _, err = f.WriteAt(buf, int64(target)*half); err != nil {
		return fmt.Errorf("writing META %s: %w", s.dev, err)
	}

	if err = f.Sync(); err != nil {
		return fmt.Errorf("writing META %s: %w", s.dev, err)
	}

	return nil
}
