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
	// SectorSize is a disk's usual logical sector: 512 bytes. Disks of 4096-byte sectors
	// (4Kn) have their table in those sectors (PlanSectors; Read finds which).
	SectorSize = 512
	// SectorSize4K is the other logical sector size a disk may have.
	SectorSize4K = 4096
	MiB          = 1 << 20

	entries   = 128
	entrySize = 128
)

// entrySectors is the table's sectors (32 of 512 bytes); partitions start on MiB boundaries.
func entrySectors(ss int64) int64 { return entries * entrySize / ss }
func alignSectors(ss int64) int64 { return MiB / ss }

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
	// SectorSize is the disk's logical sector size (0: SectorSize).
	SectorSize int64
}

func (p Placed) sector() int64 {
	if p.SectorSize == 0 {
		return SectorSize
	}

	return p.SectorSize
}

// Offset and Bytes locate the partition on the disk.
func (p Placed) Offset() int64 { return p.First * p.sector() }
func (p Placed) Bytes() int64  { return (p.Last - p.First + 1) * p.sector() }

// LastUsable is the last sector a partition may use on a disk of size bytes and sectors of ss
// bytes: the backup header and entries take the end.
func LastUsable(size, ss int64) int64 { return size/ss - 1 - 1 - entrySectors(ss) }

// Plan places the layout on a disk of size bytes and 512-byte sectors.
func Plan(layout []Partition, size int64) ([]Placed, error) {
	return PlanSectors(layout, size, SectorSize)
}

// PlanSectors places the layout on a disk of size bytes and sectors of ss bytes (512 or 4096).
func PlanSectors(layout []Partition, size, ss int64) ([]Placed, error) {
	if ss != SectorSize && ss != SectorSize4K {
		return nil, fmt.Errorf("a disk of %d-byte sectors: only 512 and 4096 are known", ss)
	}

	lastUsable := LastUsable(size, ss)

	next := alignSectors(ss)
	placed := make([]Placed, 0, len(layout))

	for i, p := range layout {
		n := p.Size / ss
		if p.Size == 0 {
			n = (lastUsable + 1 - next) / alignSectors(ss) * alignSectors(ss)
		}

		if n <= 0 || next+n-1 > lastUsable || (p.Size == 0 && n*ss < MinEphemeral) {
			return nil, fmt.Errorf("disk of %d MiB is too small for the partitions: give it at least %d MiB", size/MiB, MinSize(layout)/MiB)
		}

		placed = append(placed, Placed{Partition: p, Number: i + 1, First: next, Last: next + n - 1, GUID: uuid.New(), SectorSize: ss})
		next += n
	}

	return placed, nil
}

// Write writes a protective MBR and the primary and backup GPT of the planned partitions to a
// disk of size bytes, in the sectors they were planned for. The sectors between are not touched.
func Write(disk io.WriterAt, size int64, parts []Placed) error {
	ss := int64(SectorSize)
	if len(parts) > 0 {
		ss = parts[0].sector()
	}

	entrySectors := entrySectors(ss)

	sectors := size / ss
	if sectors < 2*(2+entrySectors)+alignSectors(ss) {
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
		h := make([]byte, ss)
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

	mbr := make([]byte, ss)
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
		if _, err := disk.WriteAt(w.data, w.lba*ss); err != nil {
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

// Read reads the primary GPT of a disk: its partitions, in table order, checksums verified. The
// table is in the disk's logical sectors: its header is looked for at 512 bytes, then at 4096.
func Read(disk io.ReaderAt) ([]Placed, error) {
	ss, err := sectorSize(disk)
	if err != nil {
		return nil, err
	}

	t, err := readTable(disk, 1, ss)
	if err != nil {
		return nil, fmt.Errorf("GPT: %w", err)
	}

	n, size, table := t.count, t.size, t.entries

	var parts []Placed

	for i := range n {
		e := table[i*size:]
		typ := getGUID(e[0:])

		if typ == uuid.Nil {
			continue
		}

		var name []uint16
		for j := 0; j < 36 && binary.LittleEndian.Uint16(e[56+2*j:]) != 0; j++ {
			name = append(name, binary.LittleEndian.Uint16(e[56+2*j:]))
		}

		parts = append(parts, Placed{
			Partition:  Partition{Name: string(utf16.Decode(name)), Type: typ},
			Number:     i + 1,
			First:      int64(binary.LittleEndian.Uint64(e[32:])),
			Last:       int64(binary.LittleEndian.Uint64(e[40:])),
			GUID:       getGUID(e[16:]),
			SectorSize: ss,
		})
		parts[len(parts)-1].Size = parts[len(parts)-1].Bytes()
	}

	return parts, nil
}

// sectorSize is the logical sector size a disk's GPT was written in: its header is looked for
// at 512 bytes, then at 4096.
func sectorSize(disk io.ReaderAt) (int64, error) {
	for _, size := range []int64{SectorSize, SectorSize4K} {
		b := make([]byte, 8)
		if _, err := disk.ReadAt(b, size); err == nil && string(b) == "EFI PART" {
			return size, nil
		}
	}

	return 0, errors.New("no GUID partition table")
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
