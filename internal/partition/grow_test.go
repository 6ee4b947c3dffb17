package partition

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// GrowLast on a real disk (a loop device whose file grew, as a cloud disk is resized): the last
// partition takes the new space, up to the limit, the MBR's boot code is kept, and the kernel
// sees the new size while the disk is attached; a partition that is not last is refused.
func TestGrowLast(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}

	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := os.Truncate(img, 64*MiB); err != nil {
		t.Fatal(err)
	}

	const ss = 512

	end := (LastUsable(64*MiB, ss)+1)/(MiB/ss)*(MiB/ss) - 1
	parts := []Placed{
		{Partition: Partition{Name: "BOOT", Type: TypeLinux}, Number: 1, First: MiB / ss, Last: 9*MiB/ss - 1, GUID: uuid.New(), SectorSize: ss},
		{Partition: Partition{Name: "EPHEMERAL", Type: TypeLinux}, Number: 2, First: 9 * MiB / ss, Last: end, GUID: uuid.New(), SectorSize: ss},
	}

	for i := range parts {
		parts[i].Size = parts[i].Bytes()
	}

	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}

	if err := Write(f, 64*MiB, parts); err != nil {
		t.Fatal(err)
	}

	bootCode := bytes.Repeat([]byte{0xeb}, mbrBootCode)
	if _, err = f.WriteAt(bootCode, 0); err != nil {
		t.Fatal(err)
	}

	f.Close()

	out, err := exec.Command("losetup", "--find", "--show", "--partscan", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}

	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })

	// The disk grows by 64 MiB; the loop device is told its new capacity. (--partscan lets the
	// loop device hold partitions.)
	if err = os.Truncate(img, 128*MiB); err != nil {
		t.Fatal(err)
	}

	if out, err = exec.Command("losetup", "--set-capacity", loop).CombinedOutput(); err != nil {
		t.Fatalf("losetup --set-capacity: %v: %s", err, out)
	}

	disk, err := os.OpenFile(loop, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()

	// The kernel is told of the partitions as uservolume does (some kernels, this CI host's
	// among them, read no GPT themselves).
	for _, p := range parts {
		if err = AddToKernel(disk, p); err != nil {
			t.Fatal(err)
		}
	}

	if _, _, err = GrowLast(disk, "BOOT", 0); err == nil || !strings.Contains(err.Error(), "BOOT is not the last partition") {
		t.Fatalf("growing BOOT, not the last: %v", err)
	}

	before, after, err := GrowLast(disk, "EPHEMERAL", 100*MiB)
	if err != nil {
		t.Fatal(err)
	}

	if after != 100*MiB || before >= after {
		t.Fatalf("EPHEMERAL %d → %d bytes, want → 100 MiB", before, after)
	}

	// The kernel's view: sectors of 512 bytes in sysfs.
	sysSize := filepath.Join("/sys/class/block", filepath.Base(loop)+"p2", "size")
	if b, err := os.ReadFile(sysSize); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(100*MiB/512) {
		t.Fatalf("the kernel sees %q sectors (%v), want %d", b, err, 100*MiB/512)
	}

	if _, after, err = GrowLast(disk, "EPHEMERAL", 0); err != nil || after != 118*MiB {
		t.Fatalf("without a limit: %d bytes, %v; want the rest of the disk, 118 MiB (from 9 MiB to the last whole MiB before the backup table)", after, err)
	}

	if _, again, err := GrowLast(disk, "EPHEMERAL", 0); err != nil || again != after {
		t.Fatalf("a second grow: %d bytes, %v; want nothing changed", again, err)
	}

	got := make([]byte, mbrBootCode)
	if _, err = disk.ReadAt(got, 0); err != nil || !bytes.Equal(got, bootCode) {
		t.Fatalf("the MBR's boot code was not kept (%v)", err)
	}

	table, err := Read(disk)
	if err != nil || len(table) != 2 || table[1].GUID != parts[1].GUID || table[0] != parts[0] {
		t.Fatalf("the table after growing: %+v, %v; want BOOT unchanged and EPHEMERAL's GUID kept", table, err)
	}
}
