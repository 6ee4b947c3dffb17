// Package vm runs the qemu provisioner's nodes on the host: a launcher per node puts the
// node's tap on the cluster bridge and runs QEMU on the metal boot assets as its child; a
// network process per cluster answers the nodes' DHCP and serves their configs over HTTP.
package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/partition"
)

// NodeSpec is what a node's launcher gets from `talosctl cluster create`.
type NodeSpec struct {
	Name    string   `json:"name"`
	Kernel  string   `json:"kernel"`
	Initrd  string   `json:"initrd"`
	Cmdline []string `json:"cmdline"`
	// ISO is a CD-ROM the node boots from while its disk is blank (the firmware tries the disk
	// first), instead of the kernel and initramfs; it stays inserted.
	ISO string `json:"iso,omitempty"`
	// USB is a USB stick's image the node boots from in the same way (on an xHCI controller).
	USB string `json:"usb,omitempty"`
	// UKI is a unified kernel image the node boots (UEFI) while its disk is blank, instead of the
	// kernel and initramfs.
	UKI string `json:"uki,omitempty"`
	// NetBoot boots the node from the network (the network card's iPXE) while its disk is
	// blank, instead of the kernel and initramfs.
	NetBoot bool `json:"netBoot,omitempty"`
	// ConfigISO is a read-only disk holding the node's config (talos.config=metal-iso).
	ConfigISO string `json:"configISO,omitempty"`
	// DirectBoot boots the kernel and initramfs on every start, never the installed disk's GRUB.
	DirectBoot bool `json:"directBoot,omitempty"`
	// UEFI, when set, boots the node with UEFI firmware (OVMF) instead of the BIOS.
	UEFI   *UEFI  `json:"uefi,omitempty"`
	Disk   string `json:"disk"` // a raw disk image, made when missing
	DiskMB int64  `json:"diskMB"`
	// DiskBlockSize is the disk's logical and physical block size (0: QEMU's 512).
	DiskBlockSize int `json:"diskBlockSize,omitempty"`
	// ExtraDisks are more disks after the first, on the drivers they name.
	ExtraDisks  []Disk `json:"extraDisks,omitempty"`
	Preallocate bool   `json:"preallocate,omitempty"` // allocate the disk files' blocks, not sparse
	// DiskImage, when set, is the disk's first content (a disk image, e.g. make boot's
	// metal-amd64.raw): copied when the disk is made, the disk DiskMB or the image's size.
	DiskImage string `json:"diskImage,omitempty"`
	BadRTC    bool   `json:"badRTC,omitempty"` // the guest's clock starts two years behind
	MemoryMB  int64  `json:"memoryMB"`
	CPUs      int    `json:"cpus"`
	KVM       bool   `json:"kvm"`
	MAC       string `json:"mac"`
	// UUID is the machine's SMBIOS system UUID (QEMU makes one up when empty).
	UUID string `json:"uuid,omitempty"`
	// TPM gives the node a TPM ("2.0" or "1.2"), emulated by swtpm with its state in TPMState.
	TPM      string `json:"tpm,omitempty"`
	TPMState string `json:"tpmState,omitempty"`
	// IOMMU gives the node an Intel IOMMU (on the q35 machine, which it needs).
	IOMMU  bool   `json:"iommu,omitempty"`
	Bridge string `json:"bridge"`
	Tap    string `json:"tap"` // the node's tap, made by the launcher (at most 15 bytes)
	MTU    int    `json:"mtu"`
}

// Disk is one more disk of a node.
type Disk struct {
	Path   string `json:"path"`
	SizeMB int64  `json:"sizeMB"`
	Driver string `json:"driver"` // one of DiskDrivers
	// Serial is the disk's serial number (virtio), which names its /dev/disk/by-id link.
	Serial string `json:"serial,omitempty"`
}

// DiskDrivers are the disk controllers a node can have extra disks on: those Debian's cloud
// kernel drives from the boot assets (virtio_blk, virtio_scsi, nvme; it has no AHCI, and IDE's
// modules are not in the initramfs).
var DiskDrivers = []string{"virtio", "scsi", "nvme"}

// Main is the launcher: `machined qemu --spec <json>`. It runs until QEMU ends (the node
// powered off) or it is told to stop (SIGTERM, SIGINT), which stops QEMU.
func Main(args []string) error {
	fs := flag.NewFlagSet("qemu", flag.ContinueOnError)
	specJSON := fs.String("spec", "", "the node, as JSON (written by talosctl cluster create)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	var spec NodeSpec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
		return fmt.Errorf("--spec: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	return Launch(ctx, spec)
}

// Launch makes the node's disk and tap and runs QEMU until it ends or ctx does.
func Launch(ctx context.Context, spec NodeSpec) error {
	if spec.DiskImage != "" {
		if err := diskFromImage(spec.Disk, spec.DiskImage, spec.DiskMB); err != nil {
			return err
		}
	}

	if err := makeDisk(spec.Disk, spec.DiskMB, spec.Preallocate); err != nil {
		return err
	}

	for _, d := range spec.ExtraDisks {
		if err := makeDisk(d.Path, d.SizeMB, spec.Preallocate); err != nil {
			return err
		}
	}

	if spec.UEFI != nil {
		if err := spec.UEFI.makeVars(); err != nil {
			return err
		}
	}

	// The tap lives as long as its file: QEMU holds it, and it goes when QEMU ends, however.
	tap, err := openTap(spec.Tap)
	if err != nil {
		return err
	}
	defer tap.Close()

	if err = joinBridge(spec.Tap, spec.Bridge, spec.MTU); err != nil {
		return err
	}

	// Pdeathsig follows the thread that started QEMU: keep to one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// QEMU runs with -no-reboot: a guest that reboots ends it, and it starts again, from the
	// disk once the node has installed itself there (as a machine's firmware would).
	for {
		rebooted, err := runQEMU(ctx, spec, tap)
		if err != nil || !rebooted || ctx.Err() != nil {
			return err
		}

		fmt.Fprintf(os.Stderr, "[launcher] the guest rebooted: starting QEMU again\n")
	}
}

// runQEMU runs QEMU once, until the guest powers off or reboots (rebooted) or ctx ends.
func runQEMU(ctx context.Context, spec NodeSpec, tap *os.File) (bool, error) {
	fromDisk := !spec.DirectBoot && Bootable(spec.Disk)
	watch := &rebootWatcher{}

	if spec.TPM != "" {
		stop, err := startTPM(ctx, spec)
		if err != nil {
			return false, err
		}
		defer stop()
	}

	cmd := exec.Command("qemu-system-x86_64", spec.Args(fromDisk)...)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(os.Stdout, watch), os.Stderr // the console, into the node's log
	cmd.ExtraFiles = []*os.File{tap}                                     // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	from := "kernel " + spec.Kernel
	switch {
	case fromDisk:
		from = "its disk"
	case spec.ISO != "":
		from = "the ISO " + spec.ISO
	case spec.USB != "":
		from = "the USB stick " + spec.USB
	case spec.UKI != "":
		from = "the unified kernel image " + spec.UKI
	case spec.NetBoot:
		from = "the network (iPXE)"
	}

	fmt.Fprintf(os.Stderr, "[launcher] starting QEMU for %s from %s (KVM: %v, tap %s on %s)\n", spec.Name, from, spec.KVM, spec.Tap, spec.Bridge)

	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting qemu-system-x86_64: %w (install it with `apt-get install qemu-system-x86`)", err)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	select {
	case err := <-done:
		fmt.Fprintf(os.Stderr, "[launcher] QEMU ended: %v\n", exitText(err))

		return err == nil && watch.rebooted(), err
	case <-ctx.Done():
	}

	// QEMU quits at once on SIGTERM; the node's disk is a file that outlives it.
	cmd.Process.Signal(syscall.SIGTERM) // it may have ended just now

	var err error

	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		err = <-done
	}

	fmt.Fprintf(os.Stderr, "[launcher] stopped QEMU: %v\n", exitText(err))

	return false, nil
}

// rebootWatcher reads the console for the kernel's last words on a reboot.
type rebootWatcher struct {
	mu   sync.Mutex
	tail []byte
	seen bool
}

const rebootLine = "reboot: Restarting system"

func (w *rebootWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()

	w.tail = append(w.tail, p...)
	if bytes.Contains(w.tail, []byte(rebootLine)) {
		w.seen = true
	}

	if len(w.tail) > len(rebootLine) {
		w.tail = w.tail[len(w.tail)-len(rebootLine):]
	}

	return len(p), nil
}

func (w *rebootWatcher) rebooted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()

	return w.seen
}

// Bootable tells a disk image the node has installed itself on: a partition table with BOOT,
// and a boot loader: GRUB's boot code in the first sector (BIOS), or the EFI partition's FAT
// (UEFI; the only one on a disk of 4096-byte sectors).
func Bootable(disk string) bool {
	f, err := os.Open(disk)
	if err != nil {
		return false
	}
	defer f.Close()

	parts, err := partition.Read(f)
	if err != nil || !slices.ContainsFunc(parts, func(p partition.Placed) bool { return p.Name == partition.Boot }) {
		return false
	}

	mbr := make([]byte, partition.SectorSize)
	if _, err = f.ReadAt(mbr, 0); err == nil && bytes.Count(mbr[:0x1b8], []byte{0}) != 0x1b8 {
		return true
	}

	i := slices.IndexFunc(parts, func(p partition.Placed) bool { return p.Name == partition.EFI })
	if i < 0 {
		return false
	}

	boot := make([]byte, partition.SectorSize)
	if _, err = f.ReadAt(boot, parts[i].Offset()); err != nil {
		return false
	}

	// A FAT boot sector: its signature, and "FAT" in the FAT12/16 or FAT32 type field.
	return boot[510] == 0x55 && boot[511] == 0xAA && (bytes.HasPrefix(boot[54:], []byte("FAT")) || bytes.HasPrefix(boot[82:], []byte("FAT")))
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}

	return err.Error()
}

// Args are QEMU's arguments: the kernel and initramfs with the node's kernel arguments (unless
// the node boots from its disk, or has an ISO), the disk and the network card on virtio, the console on stdout,
// the tap as fd 3; a reboot ends QEMU.
func (s NodeSpec) Args(fromDisk bool) []string {
	args := []string{
		"-name", s.Name, "-m", strconv.FormatInt(s.MemoryMB, 10), "-smp", strconv.Itoa(max(1, s.CPUs)),
		"-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot",
		// The node's disk boots first: the firmware must not try an extra disk before it.
		"-drive", "file=" + s.Disk + ",format=raw,if=none,id=disk0", "-device", "virtio-blk-pci,drive=disk0,bootindex=1" + blockSize(s.DiskBlockSize),
		"-netdev", "tap,id=net0,fd=3", "-device", "virtio-net-pci,netdev=net0,mac=" + s.MAC + netBootIndex(s.NetBoot),
		// The host's entropy: without it a TCG kernel is slow to seed its random numbers,
		// which DHCP's transaction IDs and TLS wait for.
		"-device", "virtio-rng-pci",
	}

	switch {
	case s.ISO != "":
		args = append(args, "-drive", "file="+s.ISO+",format=raw,if=none,media=cdrom,readonly=on,id=cd0", "-device", "ide-cd,drive=cd0,bootindex=2")
	case s.USB != "":
		args = append(args, "-device", "qemu-xhci,id=xhci",
			"-drive", "file="+s.USB+",format=raw,if=none,readonly=on,id=usb0", "-device", "usb-storage,bus=xhci.0,drive=usb0,bootindex=2")
	case s.NetBoot:
		// The firmware tries the blank disk, then the network card's iPXE.
	case !fromDisk && s.UKI != "":
		// OVMF starts the image as a UEFI program: its stub boots the kernel and initramfs in it.
		args = append(args, "-kernel", s.UKI)
	case !fromDisk:
		args = append(args, "-kernel", s.Kernel, "-initrd", s.Initrd, "-append", strings.Join(s.Cmdline, " "))
	}

	for i, d := range s.ExtraDisks {
		args = append(args, diskArgs(i, d)...)
	}

	// After the node's disks, so that the install disk keeps its name (vda).
	if s.ConfigISO != "" {
		args = append(args, "-drive", "file="+s.ConfigISO+",format=raw,if=none,readonly=on,id=config", "-device", "virtio-blk-pci,drive=config")
	}

	if s.UEFI != nil {
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+s.UEFI.Code,
			"-drive", "if=pflash,format=raw,unit=1,file="+s.UEFI.Vars)
	}

	if s.UUID != "" {
		args = append(args, "-uuid", s.UUID)
	}

	if s.TPM != "" {
		args = append(args, "-chardev", "socket,id=chrtpm,path="+s.tpmSocket(), "-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0")
	}

	if s.IOMMU {
		// The Intel IOMMU is a q35 device; interrupt remapping needs the split irqchip.
		args = append(args, "-machine", "q35,kernel-irqchip=split", "-device", "intel-iommu,intremap=on")
	}

	if s.BadRTC {
		args = append(args, "-rtc", "base="+time.Now().UTC().AddDate(-2, 0, 0).Format("2006-01-02T15:04:05"))
	}

	if s.KVM {
		args = append(args, "-enable-kvm", "-cpu", "host")
	}

	return args
}

// blockSize sets a disk's logical and physical block size, when not QEMU's default.
func blockSize(size int) string {
	if size == 0 || size == partition.SectorSize {
		return ""
	}

	return fmt.Sprintf(",logical_block_size=%d,physical_block_size=%d", size, size)
}

// netBootIndex makes the network card the second boot device, after the disk.
func netBootIndex(netBoot bool) string {
	if netBoot {
		return ",bootindex=2"
	}

	return ""
}

// diskArgs attach extra disk i on its driver's controller.
func diskArgs(i int, d Disk) []string {
	id := fmt.Sprintf("disk%d", i+1)
	drive := []string{"-drive", "file=" + d.Path + ",format=raw,if=none,id=" + id}

	switch d.Driver {
	case "scsi":
		return append(drive, "-device", "virtio-scsi-pci,id=scsi"+id, "-device", "scsi-hd,drive="+id+",bus=scsi"+id+".0")
	case "nvme":
		return append(drive, "-device", "nvme,drive="+id+",serial="+id)
	default:
		dev := "virtio-blk-pci,drive=" + id
		if d.Serial != "" {
			dev += ",serial=" + d.Serial
		}

		return append(drive, "-device", dev)
	}
}

// UEFI is a node's UEFI firmware: OVMF's code and the node's own variables (the firmware
// writes its boot entries there).
type UEFI struct {
	Code         string `json:"code"`         // read-only
	VarsTemplate string `json:"varsTemplate"` // OVMF's empty variables, beside its code
	Vars         string `json:"vars"`         // the node's, made from the template when missing
}

// UEFISearchPaths are where distributions install OVMF (Debian's ovmf first); FindUEFI looks
// in the caller's folders before them.
var UEFISearchPaths = []string{"/usr/share/OVMF", "/usr/share/ovmf", "/usr/share/edk2/ovmf", "/usr/share/edk2-ovmf/x64", "/usr/share/qemu"}

// uefiPairs are OVMF's code and variables files, as distributions name them: the 4 MiB build
// first (Debian's default since bookworm).
var uefiPairs = [][2]string{{"OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd"}, {"OVMF_CODE.fd", "OVMF_VARS.fd"}}

// FindUEFI finds OVMF's code and variables template in extra folders, then UEFISearchPaths.
func FindUEFI(extra []string) (UEFI, error) {
	for _, dir := range append(slices.Clone(extra), UEFISearchPaths...) {
		for _, p := range uefiPairs {
			code, vars := filepath.Join(dir, p[0]), filepath.Join(dir, p[1])
			if regular(code) && regular(vars) {
				return UEFI{Code: code, VarsTemplate: vars}, nil
			}
		}
	}

	return UEFI{}, fmt.Errorf("no UEFI firmware (OVMF_CODE_4M.fd and OVMF_VARS_4M.fd, or OVMF_CODE.fd and OVMF_VARS.fd) in %s: install Debian's ovmf (apt-get install ovmf)",
		strings.Join(append(slices.Clone(extra), UEFISearchPaths...), ", "))
}

func regular(path string) bool {
	fi, err := os.Stat(path)

	return err == nil && fi.Mode().IsRegular()
}

// makeVars copies the variables template to the node's file, keeping one that is there.
func (u UEFI) makeVars() error {
	if _, err := os.Stat(u.Vars); err == nil {
		return nil
	}

	b, err := os.ReadFile(u.VarsTemplate)
	if err != nil {
		return fmt.Errorf("UEFI firmware variables: %w", err)
	}

	return os.WriteFile(u.Vars, b, 0o600)
}

// makeDisk creates a disk file of sizeMB (its blocks allocated with preallocate, else sparse),
// keeping one that is there.
// diskFromImage makes the disk a copy of the image (its holes kept), DiskMB when that is
// larger, with the partition table's backup moved to its end. A disk already made is kept.
func diskFromImage(path, image string, sizeMB int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}

	if err != nil {
		return fmt.Errorf("creating the disk: %w", err)
	}
	defer f.Close()

	fi, err := os.Stat(image)
	if err != nil {
		os.Remove(path)

		return fmt.Errorf("the disk image: %w", err)
	}

	size := max(fi.Size(), sizeMB<<20)

	err = f.Truncate(size)
	if err == nil {
		err = imager.CopySparse(f, 0, image)
	}

	if err == nil {
		// The table is written again for the new size; the boot code before it (GRUB's
		// boot.img) is kept.
		var parts []partition.Placed

		bootCode := make([]byte, 0x1b8)
		if _, err = f.ReadAt(bootCode, 0); err == nil {
			if parts, err = partition.Read(f); err == nil {
				growLast(parts, size)
				err = partition.Write(f, size, parts)
			}
		}

		if err == nil {
			_, err = f.WriteAt(bootCode, 0)
		}
	}

	if err != nil {
		f.Close()
		os.Remove(path)

		return fmt.Errorf("the disk from the image %s: %w", image, err)
	}

	return f.Close()
}

// growLast extends a last partition EPHEMERAL to the end of a disk of size bytes (MiB-aligned,
// before the backup table), as upstream's disk images grow: the node grows its XFS when it mounts it.
func growLast(parts []partition.Placed, size int64) {
	if len(parts) == 0 {
		return
	}

	last := &parts[len(parts)-1]
	if last.Name != partition.Ephemeral {
		return
	}

	ss := last.SectorSize
	align := int64(partition.MiB) / ss
	end := (partition.LastUsable(size, ss)+1)/align*align - 1

	if end > last.Last {
		last.Last = end
		last.Size = last.Bytes()
	}
}

func makeDisk(path string, sizeMB int64, preallocate bool) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}

	if err != nil {
		return fmt.Errorf("creating the disk: %w", err)
	}
	defer f.Close()

	if preallocate {
		err = unix.Fallocate(int(f.Fd()), 0, 0, sizeMB<<20)
	} else {
		err = f.Truncate(sizeMB << 20)
	}

	if err != nil {
		os.Remove(path)

		return fmt.Errorf("sizing the disk %s: %w (is there %d MB free?)", path, err, sizeMB)
	}

	return f.Close()
}

// openTap creates the tap name (a network card whose other end is the file).
func openTap(name string) (*os.File, error) {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/net/tun: %w (the qemu provisioner needs root and the tun module)", err)
	}

	ifr, err := unix.NewIfreq(name)
	if err != nil {
		f.Close()

		return nil, fmt.Errorf("tap %q: %w", name, err)
	}

	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)

	if err = unix.IoctlIfreq(int(f.Fd()), unix.TUNSETIFF, ifr); err != nil {
		f.Close()

		return nil, fmt.Errorf("creating tap %s: %w", name, err)
	}

	return f, nil
}

// joinBridge makes the tap a port of the bridge and brings it up.
func joinBridge(tap, bridge string, mtu int) error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	br, err := container.LinkIndex(c, bridge)
	if err != nil {
		return fmt.Errorf("the cluster's bridge: %w (destroy the cluster and create it again)", err)
	}

	idx, err := container.LinkIndex(c, tap)
	if err != nil {
		return err
	}

	if err = c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Attributes: &rtnetlink.LinkAttributes{Master: &br, MTU: uint32(mtu)}}); err != nil {
		return fmt.Errorf("adding %s to bridge %s: %w", tap, bridge, err)
	}

	return container.SetLinkUp(c, idx)
}

// KVMWorks boots kernel on KVM for a few seconds: a /dev/kvm that opens may still fail a guest
// (nested virtualization refusing the host CPU's registers), which QEMU aborts on.
func KVMWorks(kernel string) bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}

	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	err = exec.CommandContext(ctx, "qemu-system-x86_64", "-enable-kvm", "-cpu", "host", "-m", "256", "-display", "none",
		"-no-reboot", "-kernel", kernel, "-append", "panic=-1").Run()

	return err == nil || ctx.Err() != nil // booting still, or ended by the kernel's reset
}
