// Package partition is a metal node's disk: the GUID partition table of upstream Talos 1.11's
// partitions (EFI, BIOS, BOOT, META, STATE, EPHEMERAL) and finding them again by name.
package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf16"

	"github.com/google/uuid"
)

// Partition names, as upstream's (they are the GPT partition names).
const (
	EFI       = "EFI"
	BIOS      = "BIOS"
	Boot      = "BOOT"
	Meta      = "META"
	State     = "STATE"
	Ephemeral = "EPHEMERAL"
)

// Partition type GUIDs.
var (
	TypeEFI   = uuid.MustParse("C12A7328-F81F-11D2-BA4B-00A0C93EC93B") // EFI system partition
	TypeBIOS  = uuid.MustParse("21686148-6449-6E6F-744E-656564454649") // BIOS boot: GRUB's core.img
	TypeLinux = uuid.MustParse("0FC63DAF-8483-4772-8E79-3D69D8477DE4") // Linux filesystem data
)

const (
	SectorSize = 512
	MiB        = 1 << 20

	entries      = 128
	entrySize    = 128
	entrySectors = entries * entrySize / SectorSize // 32
	alignSectors = MiB / SectorSize                 // partitions start on MiB boundaries
)

// Partition is one entry of a layout; Size 0 takes the rest of the disk.
type Partition struct {
	Name string
	Type uuid.UUID
	Size int64 // bytes, a multiple of 1 MiB
}

// Layout is upstream Talos 1.11's disk: the sizes its installer gives the partitions.
var Layout = []Partition{
	{EFI, TypeEFI, 100 * MiB},
	{BIOS, TypeBIOS, 1 * MiB},
	{Boot, TypeLinux, 1000 * MiB},
	{Meta, TypeLinux, 1 * MiB},
	{State, TypeLinux, 100 * MiB},
	{Ephemeral, TypeLinux, 0},
}

// MinEphemeral is the least EPHEMERAL a disk must leave: etcd, containerd and kubelet live there.
const MinEphemeral = 1024 * MiB

// MinSize is the smallest disk the layout fits: its partitions, the least EPHEMERAL, the first
// MiB and the backup table.
func MinSize(layout []Partition) int64 {
	need := int64(MinEphemeral + 2*MiB)
	for _, p := range layout {
		need += p.Size
	}

	return need
}

// Placed is a partition of a written table: number (1-based) and first and last sectors.
type Placed struct {
	Partition
	Number      int
	First, Last int64 // LBA, inclusive
	GUID        uuid.UUID
}

// Offset and Bytes locate the partition on the disk.
func (p Placed) Offset() int64 { return p.First * SectorSize }
func (p Placed) Bytes() int64  { return (p.Last - p.First + 1) * SectorSize }

// Plan places the layout on a disk of size bytes.
func Plan(layout []Partition, size int64) ([]Placed, error) {
	sectors := size / SectorSize
	lastUsable := sectors - 1 - 1 - entrySectors // backup header and entries at the end

	next := int64(alignSectors)
	placed := make([]Placed, 0, len(layout))

	for i, p := range layout {
		n := p.Size / SectorSize
		if p.Size == 0 {
			n = (lastUsable + 1 - next) / alignSectors * alignSectors
		}

		if n <= 0 || next+n-1 > lastUsable || (p.Size == 0 && n*SectorSize < MinEphemeral) {
			return nil, fmt.Errorf("disk of %d MiB is too small for the partitions: give it at least %d MiB", size/MiB, MinSize(layout)/MiB)
		}

		placed = append(placed, Placed{Partition: p, Number: i + 1, First: next, Last: next + n - 1, GUID: uuid.New()})
		next += n
	}

	return placed, nil
}

// Write writes a protective MBR and the primary and backup GPT of the planned partitions to a
// disk of size bytes. The sectors between are not touched.
func Write(disk io.WriterAt, size int64, parts []Placed) error {
	sectors := size / SectorSize
	if sectors < 2*(2+entrySectors)+alignSectors {
		return errors.New("disk too small for a partition table")
	}

	last := sectors - 1

	table := make([]byte, entries*entrySize)
	for i, p := range parts {
		e := table[i*entrySize:]
		putGUID(e[0:], p.Type)
		putGUID(e[16:], p.GUID)
		binary.LittleEndian.PutUint64(e[32:], uint64(p.First))
		binary.LittleEndian.PutUint64(e[40:], uint64(p.Last))

		for j, c := range utf16.Encode([]rune(p.Name)) {
			if j >= 36 {
				return fmt.Errorf("partition name %q is longer than 36 characters", p.Name)
			}

			binary.LittleEndian.PutUint16(e[56+2*j:], c)
		}
	}

	tableCRC := crc32.ChecksumIEEE(table)
	diskGUID := uuid.New()

	header := func(self, other, tableLBA int64) []byte {
		h := make([]byte, SectorSize)
		copy(h, "EFI PART")
		binary.LittleEndian.PutUint32(h[8:], 0x00010000) // revision 1.0
		binary.LittleEndian.PutUint32(h[12:], 92)        // header size
		binary.LittleEndian.PutUint64(h[24:], uint64(self))
		binary.LittleEndian.PutUint64(h[32:], uint64(other))
		binary.LittleEndian.PutUint64(h[40:], uint64(2+entrySectors))      // first usable
		binary.LittleEndian.PutUint64(h[48:], uint64(last-1-entrySectors)) // last usable
		putGUID(h[56:], diskGUID)
		binary.LittleEndian.PutUint64(h[72:], uint64(tableLBA))
		binary.LittleEndian.PutUint32(h[80:], entries)
		binary.LittleEndian.PutUint32(h[84:], entrySize)
		binary.LittleEndian.PutUint32(h[88:], tableCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))

		return h
	}

	mbr := make([]byte, SectorSize)
	pe := mbr[446:]
	copy(pe[1:4], []byte{0x00, 0x02, 0x00}) // CHS of LBA 1
	pe[4] = 0xEE                            // GPT protective
	copy(pe[5:8], []byte{0xFF, 0xFF, 0xFF})
	binary.LittleEndian.PutUint32(pe[8:], 1)
	binary.LittleEndian.PutUint32(pe[12:], uint32(min(last, 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA

	writes := []struct {
		lba  int64
		data []byte
	}{
		{0, mbr},
		{2, table},
		{1, header(1, last, 2)},
		{last - entrySectors, table},
		{last, header(last, 1, last-entrySectors)},
	}

	for _, w := range writes {
		if _, err := disk.WriteAt(w.data, w.lba*SectorSize); err != nil {
			return fmt.Errorf("writing the partition table: %w", err)
		}
	}

	return nil
}

// putGUID writes a GUID in GPT's mixed-endian form: the first three fields little-endian.
func putGUID(b []byte, u uuid.UUID) {
	binary.LittleEndian.PutUint32(b[0:], binary.BigEndian.Uint32(u[0:4]))
	binary.LittleEndian.PutUint16(b[4:], binary.BigEndian.Uint16(u[4:6]))
	binary.LittleEndian.PutUint16(b[6:], binary.BigEndian.Uint16(u[6:8]))
	copy(b[8:16], u[8:16])
}

// getGUID reads a GUID written by putGUID.
func getGUID(b []byte) uuid.UUID {
	var u uuid.UUID

	binary.BigEndian.PutUint32(u[0:], binary.LittleEndian.Uint32(b[0:4]))
	binary.BigEndian.PutUint16(u[4:], binary.LittleEndian.Uint16(b[4:6]))
	binary.BigEndian.PutUint16(u[6:], binary.LittleEndian.Uint16(b[6:8]))
	copy(u[8:16], b[8:16])

	return u
}

// Read reads the primary GPT of a disk: its partitions, in table order, checksums verified.
func Read(disk io.ReaderAt) ([]Placed, error) {
	h := make([]byte, SectorSize)
	if _, err := disk.ReadAt(h, SectorSize); err != nil {
		return nil, err
	}

	if string(h[:8]) != "EFI PART" {
		return nil, errors.New("no GUID partition table")
	}

	sum := binary.LittleEndian.Uint32(h[16:])
	check := append([]byte(nil), h[:92]...)
	binary.LittleEndian.PutUint32(check[16:], 0)

	if crc32.ChecksumIEEE(check) != sum {
		return nil, errors.New("GPT header checksum mismatch")
	}

	n, size := binary.LittleEndian.Uint32(h[80:]), binary.LittleEndian.Uint32(h[84:])
	if n == 0 || n > 1024 || size < entrySize || size > 4096 {
		return nil, fmt.Errorf("GPT header: %d entries of %d bytes", n, size)
	}

	table := make([]byte, int(n)*int(size))
	if _, err := disk.ReadAt(table, int64(binary.LittleEndian.Uint64(h[72:]))*SectorSize); err != nil {
		return nil, err
	}

	if crc32.ChecksumIEEE(table) != binary.LittleEndian.Uint32(h[88:]) {
		return nil, errors.New("GPT partition entries checksum mismatch")
	}

	var parts []Placed

	for i := range int(n) {
		e := table[i*int(size):]
		typ := getGUID(e[0:])

		if typ == uuid.Nil {
			continue
		}

		var name []uint16
		for j := 0; j < 36 && binary.LittleEndian.Uint16(e[56+2*j:]) != 0; j++ {
			name = append(name, binary.LittleEndian.Uint16(e[56+2*j:]))
		}

		parts = append(parts, Placed{
			Partition: Partition{Name: string(utf16.Decode(name)), Type: typ},
			Number:    i + 1,
			First:     int64(binary.LittleEndian.Uint64(e[32:])),
			Last:      int64(binary.LittleEndian.Uint64(e[40:])),
			GUID:      getGUID(e[16:]),
		})
		parts[len(parts)-1].Size = parts[len(parts)-1].Bytes()
	}

	return parts, nil
}
