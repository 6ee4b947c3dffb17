package vm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/talos-go/talos/internal/partition"
)

// A preallocated disk has its blocks; a sparse one has none; one that is there is kept.
func TestMakeDisk(t *testing.T) {
	dir := t.TempDir()

	for _, tc := range []struct {
		name        string
		preallocate bool
	}{{"sparse.raw", false}, {"full.raw", true}} {
		path := filepath.Join(dir, tc.name)
		if err := makeDisk(path, 8, tc.preallocate); err != nil {
			t.Fatal(err)
		}

		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}

		allocated := fi.Sys().(*syscall.Stat_t).Blocks * 512
		if fi.Size() != 8<<20 || (allocated >= 8<<20) != tc.preallocate || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: size %d, %d bytes allocated, mode %v", tc.name, fi.Size(), allocated, fi.Mode())
		}
	}

	path := filepath.Join(dir, "sparse.raw")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := makeDisk(path, 8, false); err != nil {
		t.Fatal(err)
	}

	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Fatalf("an existing disk was replaced: %d bytes", len(b))
	}
}

// Each extra disk is on its driver's controller; a bad RTC starts in the past.
func TestArgs(t *testing.T) {
	s := NodeSpec{Name: "n", MemoryMB: 2048, CPUs: 2, Disk: "/d/disk.raw", MAC: "52:54:00:05:00:02", BadRTC: true,
		ExtraDisks: []Disk{{Path: "/d/disk-1.raw", Driver: "nvme"}, {Path: "/d/disk-2.raw", Driver: "scsi"}}}

	args := strings.Join(s.Args(false), " ")

	for _, want := range []string{
		"-drive file=/d/disk.raw,format=raw,if=none,id=disk0 -device virtio-blk-pci,drive=disk0,bootindex=1",
		"file=/d/disk-1.raw,format=raw,if=none,id=disk1 -device nvme,drive=disk1",
		"-device virtio-scsi-pci,id=scsidisk2 -device scsi-hd,drive=disk2,bus=scsidisk2.0",
		"virtio-net-pci,netdev=net0,mac=52:54:00:05:00:02",
		"-rtc base=",
		"-no-reboot",
		"-kernel ",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("no %q in %s", want, args)
		}
	}

	if fromDisk := strings.Join(s.Args(true), " "); strings.Contains(fromDisk, "-kernel") || !strings.Contains(fromDisk, "-no-reboot") {
		t.Errorf("booting from the disk: %s", fromDisk)
	}

	// With an ISO the firmware boots it after the blank disk; no kernel is given directly.
	s.ISO = "/a/metal-amd64.iso"
	for _, fromDisk := range []bool{false, true} {
		args := strings.Join(s.Args(fromDisk), " ")
		if strings.Contains(args, "-kernel") || !strings.Contains(args, "-drive file=/a/metal-amd64.iso,format=raw,if=none,media=cdrom,readonly=on,id=cd0 -device ide-cd,drive=cd0,bootindex=2") {
			t.Errorf("with an ISO (from disk: %v): %s", fromDisk, args)
		}
	}
}

// With UEFI the firmware is OVMF's code, read-only, and the node's own variables; without, the
// BIOS (no pflash). The variables start as the template and are kept after.
func TestUEFI(t *testing.T) {
	s := NodeSpec{Name: "n", MemoryMB: 2048, CPUs: 1, Disk: "/d/disk.raw", MAC: "52:54:00:05:00:02"}
	if args := strings.Join(s.Args(true), " "); strings.Contains(args, "pflash") {
		t.Errorf("BIOS boot with UEFI firmware: %s", args)
	}

	s.UEFI = &UEFI{Code: "/fw/OVMF_CODE.fd", Vars: "/d/uefi-vars.fd"}
	if args := strings.Join(s.Args(true), " "); !strings.Contains(args, "-drive if=pflash,format=raw,unit=0,readonly=on,file=/fw/OVMF_CODE.fd -drive if=pflash,format=raw,unit=1,file=/d/uefi-vars.fd") {
		t.Errorf("UEFI: %s", args)
	}

	// The caller's folders are searched first; a folder without both files is passed over.
	half, fw := t.TempDir(), t.TempDir()
	for dir, files := range map[string][]string{half: {"OVMF_CODE_4M.fd"}, fw: {"OVMF_CODE.fd", "OVMF_VARS.fd"}} {
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	u, err := FindUEFI([]string{half, fw})
	if err != nil || u.Code != filepath.Join(fw, "OVMF_CODE.fd") || u.VarsTemplate != filepath.Join(fw, "OVMF_VARS.fd") {
		t.Fatalf("FindUEFI: %+v, %v", u, err)
	}

	u.Vars = filepath.Join(t.TempDir(), "uefi-vars.fd")
	if err = u.makeVars(); err != nil {
		t.Fatal(err)
	}

	if got, _ := os.ReadFile(u.Vars); string(got) != "OVMF_VARS.fd" {
		t.Fatalf("the node's variables are not the template: %q", got)
	}

	if err = os.WriteFile(u.Vars, []byte("written by the firmware"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err = u.makeVars(); err != nil {
		t.Fatal(err)
	}

	if got, _ := os.ReadFile(u.Vars); string(got) != "written by the firmware" {
		t.Error("the node's variables were replaced")
	}

	// Nowhere: the error names the folders searched and the package to install.
	saved := UEFISearchPaths
	UEFISearchPaths = []string{t.TempDir()}
	t.Cleanup(func() { UEFISearchPaths = saved })

	if _, err = FindUEFI([]string{half}); err == nil || !strings.Contains(err.Error(), half) || !strings.Contains(err.Error(), "apt-get install ovmf") {
		t.Errorf("no firmware: %v", err)
	}
}

// With a USB stick the firmware boots it after the blank disk, from an xHCI controller.
func TestArgsUSB(t *testing.T) {
	s := NodeSpec{Name: "n", MemoryMB: 2048, CPUs: 1, Disk: "/d/disk.raw", MAC: "52:54:00:05:00:02", USB: "/a/metal-amd64.iso"}
	for _, fromDisk := range []bool{false, true} {
		args := strings.Join(s.Args(fromDisk), " ")
		if strings.Contains(args, "-kernel") || !strings.Contains(args, "-device qemu-xhci,id=xhci -drive file=/a/metal-amd64.iso,format=raw,if=none,readonly=on,id=usb0 -device usb-storage,bus=xhci.0,drive=usb0,bootindex=2") {
			t.Errorf("with a USB stick (from disk: %v): %s", fromDisk, args)
		}
	}
}

// The metal-iso config disk comes after the node's disks: the install disk stays vda.
func TestArgsConfigISO(t *testing.T) {
	s := NodeSpec{Name: "n", MemoryMB: 2048, CPUs: 1, Disk: "/d/disk.raw", MAC: "52:54:00:05:00:02", ConfigISO: "/d/config.iso",
		ExtraDisks: []Disk{{Path: "/d/disk-1.raw", Driver: "virtio"}}}

	args := strings.Join(s.Args(false), " ")
	iso := strings.Index(args, "-drive file=/d/config.iso,format=raw,if=none,readonly=on,id=config -device virtio-blk-pci,drive=config")

	if iso < 0 || iso < strings.Index(args, "disk-1.raw") || iso < strings.Index(args, "disk.raw") {
		t.Errorf("config ISO: %s", args)
	}
}

// A disk is bootable once it has a partition table with BOOT and boot code in its first sector.
func TestBootable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.raw")
	if err := makeDisk(path, 3072, false); err != nil {
		t.Fatal(err)
	}

	if Bootable(path) {
		t.Fatal("a blank disk is bootable")
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	parts, err := partition.Plan(partition.Layout, 3072<<20)
	if err != nil {
		t.Fatal(err)
	}

	if err = partition.Write(f, 3072<<20, parts); err != nil {
		t.Fatal(err)
	}

	if Bootable(path) {
		t.Fatal("a disk without boot code is bootable")
	}

	boot := bytes.Repeat([]byte{0xeb}, partition.SectorSize)
	if err = partition.InstallGRUB(f, parts[1], boot, bytes.Repeat([]byte{1}, 4*partition.SectorSize)); err != nil {
		t.Fatal(err)
	}

	if !Bootable(path) {
		t.Fatal("an installed disk is not bootable")
	}
}

// The kernel's last words on a reboot are found across the console's writes; a power-off's are
// not a reboot.
func TestRebootWatcher(t *testing.T) {
	w := &rebootWatcher{}
	for _, chunk := range []string{"[   12.5] reboot: Re", "starting sys", "tem\r\n"} {
		w.Write([]byte(chunk))
	}

	if !w.rebooted() {
		t.Error("a reboot split across writes was missed")
	}

	off := &rebootWatcher{}
	off.Write([]byte("[   12.5] reboot: Power down\r\n"))

	if off.rebooted() {
		t.Error("a power-off was taken for a reboot")
	}
}

// The machine's UUID, its TPM (QEMU talks to swtpm on a short socket path) and the IOMMU (the
// q35 machine) are in QEMU's arguments only when asked for.
func TestArgsMachineDevices(t *testing.T) {
	s := NodeSpec{Name: "n", Disk: "/d/disk.raw", UUID: "a4a9fe5d-1f47-4b20-a87d-1fe170b74a74", TPM: TPM2,
		TPMState: "/a/very/long/cluster/folder/" + strings.Repeat("x", 120) + "/tpm", IOMMU: true}

	args := strings.Join(s.Args(false), " ")
	for _, want := range []string{
		"-uuid a4a9fe5d-1f47-4b20-a87d-1fe170b74a74",
		"-tpmdev emulator,id=tpm0,chardev=chrtpm -device tpm-tis,tpmdev=tpm0",
		"-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q: %s", want, args)
		}
	}

	if sock := s.tpmSocket(); len(sock) >= 108 || !strings.Contains(args, "path="+sock) {
		t.Errorf("the TPM's socket %q (%d bytes) is too long for a unix socket, or not QEMU's", sock, len(sock))
	}

	for _, absent := range []string{"-uuid", "tpm", "q35"} {
		if strings.Contains(strings.Join(NodeSpec{Name: "n", Disk: "/d/disk.raw"}.Args(false), " "), absent) {
			t.Errorf("a plain node's args have %q", absent)
		}
	}
}

// A unified kernel image is QEMU's -kernel (OVMF starts it), with no initramfs or arguments of
// QEMU's; once the node is on its disk, the disk boots.
func TestArgsUKI(t *testing.T) {
	s := NodeSpec{Name: "n", Disk: "/d/disk.raw", UKI: "/b/uki.efi", Kernel: "/b/vmlinuz", Initrd: "/b/initramfs.img"}

	if args := strings.Join(s.Args(false), " "); !strings.Contains(args, "-kernel /b/uki.efi") || strings.Contains(args, "-initrd") || strings.Contains(args, "-append") {
		t.Errorf("first boot: %s", args)
	}

	if args := strings.Join(s.Args(true), " "); strings.Contains(args, "-kernel") {
		t.Errorf("from the disk: %s", args)
	}
}

// A disk of 4096-byte sectors (no BIOS boot code) is bootable once its EFI partition holds a
// FAT, as mkfs.fat writes it.
func TestBootable4K(t *testing.T) {
	if _, err := exec.LookPath("mkfs.fat"); err != nil {
		t.Skip("no mkfs.fat (Debian's dosfstools)")
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "disk.raw")

	if err := makeDisk(path, 3072, false); err != nil {
		t.Fatal(err)
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	parts, err := partition.PlanSectors(partition.Layout, 3072<<20, partition.SectorSize4K)
	if err != nil {
		t.Fatal(err)
	}

	if err = partition.Write(f, 3072<<20, parts); err != nil {
		t.Fatal(err)
	}

	if Bootable(path) {
		t.Fatal("a 4Kn disk with a blank EFI partition is bootable")
	}

	fat := filepath.Join(dir, "efi.img")
	if out, err := exec.Command("mkfs.fat", "-S", "4096", "-n", "EFI", "-C", fat, "102400").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v: %s", err, out)
	}

	sector, err := os.ReadFile(fat)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = f.WriteAt(sector[:partition.SectorSize4K], parts[0].Offset()); err != nil {
		t.Fatal(err)
	}

	if !Bootable(path) {
		t.Fatal("a 4Kn disk with its EFI partition's FAT is not bootable")
	}
}

func TestArgsDiskBlockSize(t *testing.T) {
	s := NodeSpec{Name: "n", Disk: "/d/disk.raw", DiskBlockSize: 4096}
	if args := strings.Join(s.Args(true), " "); !strings.Contains(args, "bootindex=1,logical_block_size=4096,physical_block_size=4096") {
		t.Errorf("args: %s", args)
	}

	if args := strings.Join(NodeSpec{Name: "n", Disk: "/d/disk.raw", DiskBlockSize: 512}.Args(true), " "); strings.Contains(args, "block_size") {
		t.Errorf("512: %s", args)
	}
}
