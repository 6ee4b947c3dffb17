// Package blockwipe wipes block devices that are not in use: `talosctl wipe disk` on a metal
// node. Every device of a request is checked and opened before any is written, so a request
// with one bad device changes nothing.
package blockwipe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/partition"
)

// Method is how much of a device is wiped.
type Method int

const (
	// Fast zeroes the device's first and last MiB: partition tables (MBR, primary and backup
	// GPT) and the filesystem, swap, RAID and LUKS signatures.
	Fast Method = iota
	// Zeroes zeroes the whole device.
	Zeroes
)

// fastBytes is what a fast wipe zeroes at each end.
const fastBytes = 1 << 20

// Errors a caller maps to its API's codes.
var (
	ErrName     = errors.New("not a block device name")
	ErrNotFound = errors.New("no such block device")
	ErrInUse    = errors.New("in use")
)

// validName is a kernel block device name (sda, vda5, nvme0n1p1, dm-0): no path.
var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_:.-]*$`)

// Device is one device to wipe, by its kernel name.
type Device struct {
	Name   string
	Method Method
	// SkipHolderCheck wipes a device another block device is built on (RAID, LVM, dm-crypt).
	SkipHolderCheck bool
	// DropPartition removes a partition from its disk's GPT once wiped (a disk is only wiped).
	DropPartition bool
}

// Wipe wipes devices, found under sysfs ("/sys") and dev ("/dev"). A device that is mounted,
// swapped on or claimed (its own or, for a disk, one of its partitions: the kernel refuses it an
// exclusive open) or, without SkipHolderCheck, holds another block device is refused, and
// then nothing is wiped.
func Wipe(sysfs, dev string, devices []Device) error {
	files := make([]*os.File, 0, len(devices))

	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()

	for _, d := range devices {
		f, err := open(sysfs, dev, d)
		if err != nil {
			return err
		}

		files = append(files, f)
	}

	for i, d := range devices {
		if err := wipe(files[i], d.Method); err != nil {
			return fmt.Errorf("wiping %s: %w", d.Name, err)
		}

		number, isPartition := partitionNumber(sysfs, d.Name)

		switch {
		case !isPartition:
			// A disk's kernel view of its partitions follows its (now empty) table.
			unix.IoctlSetInt(int(files[i].Fd()), unix.BLKRRPART, 0) //nolint:errcheck // a device without partitions (a loop device without partscan) refuses: nothing to re-read
		case d.DropPartition:
			files[i].Close() // the kernel removes only a partition nobody has open

			if err := drop(sysfs, dev, d.Name, number); err != nil {
				return fmt.Errorf("%s is wiped, but dropping it from its disk's table: %w", d.Name, err)
			}
		}
	}

	return nil
}

// partitionNumber is a partition's number on its disk; false for a whole device.
func partitionNumber(sysfs, name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(sysfs, "class", "block", name, "partition"))
	if err != nil {
		return 0, false
	}

	n, err := strconv.Atoi(strings.TrimSpace(string(b)))

	return n, err == nil
}

// drop removes partition number name from its disk's GPT, then from the kernel's view.
func drop(sysfs, dev, name string, number int) error {
	link, err := filepath.EvalSymlinks(filepath.Join(sysfs, "class", "block", name))
	if err != nil {
		return err
	}

	disk, err := os.OpenFile(filepath.Join(dev, filepath.Base(filepath.Dir(link))), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer disk.Close()

	if err = partition.Drop(disk, number); err != nil {
		return err
	}

	if err = disk.Sync(); err != nil {
		return err
	}

	p := unix.BlkpgPartition{Pno: int32(number)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_DEL_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}

	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, disk.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); errno != 0 {
		return fmt.Errorf("the table no longer has it, but the kernel kept it until the next boot: %w", errno)
	}

	return nil
}

// open checks that d may be wiped and opens it exclusively.
func open(sysfs, dev string, d Device) (*os.File, error) {
	if !validName.MatchString(d.Name) {
		return nil, fmt.Errorf("device %q: %w: give a kernel name such as sda, vda5 or nvme0n1p1", d.Name, ErrName)
	}

	if d.Method != Fast && d.Method != Zeroes {
		return nil, fmt.Errorf("device %s: unknown wipe method %d: use FAST or ZEROES", d.Name, d.Method)
	}

	class := filepath.Join(sysfs, "class", "block", d.Name)
	if _, err := os.Stat(class); err != nil {
		return nil, fmt.Errorf("device %s: %w (see `talosctl get discoveredvolumes`)", d.Name, ErrNotFound)
	}

	if !d.SkipHolderCheck {
		if held := holders(class); len(held) > 0 {
			return nil, fmt.Errorf("device %s: %w: %v is built on it (RAID, LVM or an encrypted volume): remove that first", d.Name, ErrInUse, held)
		}
	}

	f, err := os.OpenFile(filepath.Join(dev, d.Name), os.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EBUSY) {
		return nil, fmt.Errorf("device %s: %w: it, or a partition of it, is mounted or claimed (see `talosctl mounts` and `talosctl get volumestatus`)", d.Name, ErrInUse)
	}

	if err != nil {
		return nil, fmt.Errorf("device %s: %w", d.Name, err)
	}

	return f, nil
}

// holders are the block devices built on a device or on one of its partitions.
func holders(class string) []string {
	var out []string

	dirs, _ := filepath.Glob(filepath.Join(class, "*", "partition"))
	dirs = append(dirs, filepath.Join(class, "partition"))

	for _, p := range dirs {
		entries, _ := os.ReadDir(filepath.Join(filepath.Dir(p), "holders"))
		for _, e := range entries {
			out = append(out, e.Name())
		}
	}

	return out
}

func wipe(f *os.File, m Method) error {
	var size uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
		return fmt.Errorf("reading its size: %w", errno)
	}

	var err error

	if m == Zeroes {
		err = zero(f, 0, size)
	} else {
		head := min(size, fastBytes)
		if err = zero(f, 0, head); err == nil && size > head {
			tail := min(size-head, fastBytes)
			err = zero(f, size-tail, tail)
		}
	}

	if err != nil {
		return err
	}

	return f.Sync()
}

// zero zeroes n bytes at off: the kernel's BLKZEROOUT (offloaded where the device can), or
// plain writes where it refuses.
func zero(f *os.File, off, n uint64) error {
	r := [2]uint64{off, n}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r))); errno == 0 {
		return nil
	}

	buf := make([]byte, min(n, 4<<20))
	for done := uint64(0); done < n; {
		k := min(n-done, uint64(len(buf)))
		if _, err := f.WriteAt(buf[:k], int64(off+done)); err != nil {
			return err
		}

		done += k
	}

	return nil
}
