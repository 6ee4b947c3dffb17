package udev

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/talos-go/talos/internal/partition"
)

// Volume is a block device as probed: the device, its partition entry and what it holds.
type Volume struct {
	Name       string // vda3
	Type       string // disk or partition
	DevicePath string // its folder under /sys/devices
	Parent     string // a partition's disk (vda)
	Size       uint64 // bytes
	SectorSize uint
	IOSize     uint

	PartitionIndex uint
	PartitionLabel string
	PartitionUUID  string
	PartitionType  string

	Filesystem          string // xfs, vfat, ext4, luks, swap, squashfs, iso9660, gpt; empty when unknown
	Label, UUID         string
	FilesystemBlockSize uint32
	ProbedSize          uint64
}

// Volumes probes every block device in sysfs (/sys): its partition entry on its disk's GPT
// and what its first blocks hold. A device that cannot be read (a loop device with nothing
// attached) is listed with what sysfs says.
func Volumes(sysfs, dev string) ([]Volume, error) {
	devs, err := partition.Devices(sysfs)
	if err != nil {
		return nil, err
	}

	tables := map[string][]partition.Placed{}
	vols := make([]Volume, 0, len(devs))

	for _, d := range devs {
		dir := filepath.Join(sysfs, "class", "block", d.Name)
		sectors, _ := strconv.ParseUint(readTrim(filepath.Join(dir, "size")), 10, 64)

		if sectors == 0 {
			continue // an empty loop device or drive
		}

		v := Volume{Name: d.Name, Type: "disk", Size: sectors * 512}
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			v.DevicePath = real
		}

		queue := filepath.Join(dir, "queue")
		if d.Disk != "" {
			v.Type, v.Parent = "partition", d.Disk
			queue = filepath.Join(sysfs, "class", "block", d.Disk, "queue")
			v.PartitionLabel = d.PartName

			n, _ := strconv.Atoi(d.PartN)
			v.PartitionIndex = uint(n)

			if _, ok := tables[d.Disk]; !ok {
				tables[d.Disk] = readTable(filepath.Join(dev, d.Disk))
			}

			for _, p := range tables[d.Disk] {
				if p.Number == n {
					v.PartitionUUID, v.PartitionType = p.GUID.String(), strings.ToUpper(p.Type.String())
				}
			}
		}

		ss, _ := strconv.ParseUint(readTrim(filepath.Join(queue, "logical_block_size")), 10, 32)
		io, _ := strconv.ParseUint(readTrim(filepath.Join(queue, "minimum_io_size")), 10, 32)
		v.SectorSize, v.IOSize = uint(ss), uint(io)

		if f, err := os.Open(filepath.Join(dev, d.Name)); err == nil {
			probe(f, &v)
			f.Close()
		}

		vols = append(vols, v)
	}

	return vols, nil
}

func readTable(path string) []partition.Placed {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()

	parts, _ := partition.Read(f)

	return parts
}

// probe reads what the device's first blocks hold: a GPT, or XFS, ext4, FAT, LUKS, swap,
// squashfs or ISO 9660.
func probe(r io.ReaderAt, v *Volume) {
	b := make([]byte, 4096)
	if n, _ := r.ReadAt(b, 0); n < len(b) {
		return
	}

	switch {
	case string(b[512:520]) == "EFI PART":
		v.Filesystem = "gpt"
		v.UUID = diskGUID(b[512+56:])
	case string(b[0:4]) == "XFSB":
		v.Filesystem = "xfs"
		v.FilesystemBlockSize = binary.BigEndian.Uint32(b[4:])
		v.ProbedSize = binary.BigEndian.Uint64(b[8:]) * uint64(v.FilesystemBlockSize)
		v.UUID = uuid.UUID(b[32:48]).String()
		v.Label = cString(b[108:120])
	case binary.LittleEndian.Uint16(b[1024+56:]) == 0xEF53:
		sb := b[1024:]
		v.Filesystem = "ext4"
		v.FilesystemBlockSize = 1024 << binary.LittleEndian.Uint32(sb[24:])
		v.ProbedSize = uint64(binary.LittleEndian.Uint32(sb[4:])) * uint64(v.FilesystemBlockSize)
		v.UUID = uuid.UUID(sb[104:120]).String()
		v.Label = cString(sb[120:136])
	case string(b[0x52:0x57]) == "FAT32":
		v.Filesystem = "vfat"
		v.UUID = fatSerial(b[0x43:])
		v.Label = strings.TrimSpace(cString(b[0x47:0x52]))
	case string(b[0x36:0x39]) == "FAT":
		v.Filesystem = "vfat"
		v.UUID = fatSerial(b[0x27:])
		v.Label = strings.TrimSpace(cString(b[0x2b:0x36]))
	case string(b[0:6]) == "LUKS\xba\xbe":
		// A LUKS header (an encrypted volume): its label and UUID are text in it.
		v.Filesystem = "luks"
		v.Label = cString(b[24:72])
		v.UUID = cString(b[168:208])
	case string(b[4086:4096]) == "SWAPSPACE2":
		// Swap space (version 1): its UUID and label follow the boot block's 1024 bytes.
		v.Filesystem = "swap"
		v.UUID = uuid.UUID(b[1036:1052]).String()
		v.Label = cString(b[1052:1068])
	case string(b[0:4]) == "hsqs":
		v.Filesystem = "squashfs"
		v.FilesystemBlockSize = binary.LittleEndian.Uint32(b[12:])
		v.ProbedSize = binary.LittleEndian.Uint64(b[40:])
	}

	if v.Filesystem == "" {
		probeISO9660(r, v)
	}

	if v.Label == "NO NAME" {
		v.Label = ""
	}
}

// probeISO9660 reads an ISO 9660 primary volume descriptor (sector 16 of 2048 bytes): its
// volume identifier is the label (metal-iso, say), its block size and count the size.
func probeISO9660(r io.ReaderAt, v *Volume) {
	pvd := make([]byte, 2048)
	if n, _ := r.ReadAt(pvd, 16*2048); n < len(pvd) || pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return
	}

	v.Filesystem = "iso9660"
	v.Label = strings.TrimRight(string(pvd[40:72]), " ")
	v.FilesystemBlockSize = uint32(binary.LittleEndian.Uint16(pvd[128:]))
	v.ProbedSize = uint64(binary.LittleEndian.Uint32(pvd[80:])) * uint64(v.FilesystemBlockSize)

	// As blkid: the volume's creation date (YYYYMMDDhhmmsscc) is its UUID, dashed.
	if d := string(pvd[813:829]); strings.Trim(d, "0 \x00") != "" {
		v.UUID = strings.Join([]string{d[0:4], d[4:6], d[6:8], d[8:10], d[10:12], d[12:14], d[14:16]}, "-")
	}
}

// Probe reads what the block device at path holds (Volume's Filesystem, Label, UUID and sizes).
func Probe(path string) (Volume, error) {
	var v Volume

	f, err := os.Open(path)
	if err != nil {
		return v, err
	}
	defer f.Close()

	probe(f, &v)

	return v, nil
}

// diskGUID reads a GPT header's disk GUID (mixed-endian).
func diskGUID(b []byte) string {
	var u uuid.UUID

	binary.BigEndian.PutUint32(u[0:], binary.LittleEndian.Uint32(b[0:]))
	binary.BigEndian.PutUint16(u[4:], binary.LittleEndian.Uint16(b[4:]))
	binary.BigEndian.PutUint16(u[6:], binary.LittleEndian.Uint16(b[6:]))
	copy(u[8:], b[8:16])

	return u.String()
}

func fatSerial(b []byte) string {
	s := binary.LittleEndian.Uint32(b)

	return fmt.Sprintf("%04X-%04X", s>>16, s&0xffff)
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}

	return string(b)
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)

	return strings.TrimSpace(string(b))
}
