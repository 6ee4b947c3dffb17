// Package install makes a disk a metal node's: partitions, filesystems, GRUB, the boot slot and
// the node's STATE.
package install

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/blockwipe"
	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/tpmseal"
	"github.com/talos-go/talos/internal/uki"
)

// Options are an install's inputs.
type Options struct {
	Disk      string   // the disk to install to (machine.install.disk), e.g. /dev/vda
	Initramfs string   // the running initramfs's files (container.InitramfsDir)
	State     string   // the node's STATE so far (its config), copied to the disk's STATE
	Cmdline   []string // the installed system's kernel arguments
	// Encryption is the LUKS2 encryption of STATE and EPHEMERAL (by label) the config asks for.
	Encryption map[string]*encryption.Spec
	NodeUUID   string // the machine's SMBIOS UUID, for nodeID and KMS keys
	// Wipe zeroes the whole disk before it is partitioned (machine.install.wipe).
	Wipe bool
	// Ephemeral bounds EPHEMERAL's size (VolumeConfig EPHEMERAL's provisioning); by default it
	// takes the rest of the disk.
	Ephemeral EphemeralSize
	Log       func(format string, args ...any)
}

// UEFIBootPath is GRUB's UEFI program on the EFI partition: the removable-media path, which
// firmware boots without a boot entry in its variables.
const UEFIBootPath = "EFI/BOOT/BOOTX64.EFI"

// ToDisk makes a disk the node's: upstream's partitions (everything on the disk is lost), XFS
// on BOOT, STATE and EPHEMERAL, GRUB for BIOS and UEFI boot (FAT32 on EFI), slot A on BOOT (this
// kernel and initramfs), an empty META (zeroed: internal/meta's partition store) and this boot's
// STATE on the disk's STATE. The node boots from the disk next.
func ToDisk(ctx context.Context, o Options) error {
	disk, err := o.resolveDisk()
	if err != nil {
		return err
	}

	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()

	size, ss, parts, err := o.planPartitions(f)
	if err != nil {
		return err
	}

	// Booted from a signed UKI, the node installs one; what it cannot install is refused before
	// the disk changes.
	signed, ukiErr := o.bootedUKI()
	if ukiErr != nil {
		if o.tpmKeys() {
			return ukiErr
		}

		o.Log("%v: installing the kernel and initramfs instead", ukiErr)
	}

	if o.Wipe {
		if err = o.wipeDisk(disk, size); err != nil {
			return err
		}
	}

	o.Log("installing to %s (%d MiB, %d-byte sectors): partitions %s", o.Disk, size/partition.MiB, ss, layoutText(parts))

	devs, err := o.writePartitions(ctx, f, disk, size, parts)
	if err != nil {
		return err
	}

	if err = metal.LoadModule("xfs"); err != nil {
		return err
	}

	// What the filesystems are made on: the partitions, or the LUKS2 volumes on them.
	targets := map[string]string{}

	salt, err := o.encrypt(ctx, devs, targets, signed)
	if err != nil {
		return err
	}

	defer func() {
		for name := range o.Encryption {
			encryption.Cryptsetup{}.Close(context.Background(), name) // the node reboots next
		}
	}()

	if err = o.formatFilesystems(ctx, devs, targets, ss); err != nil {
		return err
	}

	if err = o.installGRUB(f, parts, devs, ss); err != nil {
		return err
	}

	what := "kernel, initramfs"
	if signed != nil {
		what = "the unified kernel image (its PCR signature approves it)"
	}

	o.Log("writing slot A to BOOT: %s, GRUB's menu", what)

	err = onPartition(partition.Boot, targets[partition.Boot], "xfs", func(dir string) error {
		return writeSlot(dir, "A", o, signed)
	})
	if err != nil {
		return err
	}

	o.Log("copying STATE (the machine config) to the disk")

	return onPartition(partition.State, targets[partition.State], "xfs", func(dir string) error {
		if salt != nil {
			if err := os.WriteFile(filepath.Join(dir, encryption.SaltFile), salt, 0o600); err != nil {
				return err
			}
		}

		return copyTree(o.State, dir)
	})
}

// resolveDisk names the block device machine.install.disk is.
func (o Options) resolveDisk() (string, error) {
	// A /dev/disk/by-* name is the link udevd made: the kernel knows the disk by what it points to.
	disk, err := filepath.EvalSymlinks(o.Disk)
	if err != nil {
		disk = o.Disk
	}

	fi, err := os.Stat(disk)
	if err != nil || fi.Mode()&fs.ModeDevice == 0 || fi.Mode()&fs.ModeCharDevice != 0 {
		return "", fmt.Errorf("machine.install.disk %s is not a disk of this machine: name one `talosctl get disks` lists", o.Disk)
	}

	return disk, nil
}

// planPartitions measures the open disk f (its size and logical sector size) and places upstream's
// partitions on it.
func (o Options) planPartitions(f *os.File) (size int64, ss int, parts []partition.Placed, err error) {
	size, err = f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, 0, nil, err
	}

	// The table is in the disk's logical sectors (512 bytes, or 4096 on a 4Kn disk).
	ss, err = unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("machine.install.disk %s: its sector size: %w", o.Disk, err)
	}

	parts, err = partition.PlanSectors(partition.Layout, size, int64(ss))
	if err == nil {
		err = o.Ephemeral.apply(parts)
	}

	if err != nil {
		return 0, 0, nil, fmt.Errorf("machine.install.disk %s: %w", o.Disk, err)
	}

	return size, ss, parts, nil
}

// wipeDisk zeroes the whole disk (machine.install.wipe).
func (o Options) wipeDisk(disk string, size int64) error {
	// As upstream's installer with wipe: the whole disk is zeroed (BLKZEROOUT, which the device
	// offloads where it can, or written zeroes), this disk only, refused if it is in use.
	o.Log("wiping %s (machine.install.wipe): zeroing all of its %d MiB", o.Disk, size/partition.MiB)

	start := time.Now()
	if err := blockwipe.Wipe("/sys", "/dev", []blockwipe.Device{{Name: filepath.Base(disk), Method: blockwipe.Zeroes}}); err != nil {
		return fmt.Errorf("machine.install.wipe: %w", err)
	}

	o.Log("wiped %s in %s", o.Disk, time.Since(start).Round(time.Millisecond))

	return nil
}

// writePartitions writes the partition table to f, has the kernel read it and returns the
// partitions' devices once they appear.
func (o Options) writePartitions(ctx context.Context, f *os.File, disk string, size int64, parts []partition.Placed) (map[string]partition.Device, error) {
	// Old filesystems' signatures go, so nothing mistakes a partition for what it was.
	zeros := make([]byte, partition.MiB)
	for _, p := range parts {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), p.Bytes())], p.Offset()); err != nil {
			return nil, err
		}
	}

	if err := partition.Write(f, size, parts); err != nil {
		return nil, err
	}

	if err := f.Sync(); err != nil {
		return nil, err
	}

	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err != nil {
		return nil, fmt.Errorf("the kernel did not read %s's new partitions (is one of them in use?): %w", o.Disk, err)
	}

	return waitPartitions(ctx, filepath.Base(disk), len(parts))
}

// formatFilesystems makes XFS on BOOT, STATE and EPHEMERAL (on targets) and FAT on EFI.
func (o Options) formatFilesystems(ctx context.Context, devs map[string]partition.Device, targets map[string]string, ss int) error {
	for _, name := range []string{partition.Boot, partition.State, partition.Ephemeral} {
		o.Log("formatting %s (%s) as XFS", name, targets[name])

		if err := partition.FormatXFS(ctx, targets[name], name); err != nil {
			return err
		}
	}

	// The EFI partition holds GRUB for UEFI, which reads the same menu on BOOT as BIOS's.
	o.Log("formatting %s (%s) as FAT32", partition.EFI, devs[partition.EFI].Path())

	// FAT32 needs 65525 clusters: on 4096-byte sectors the 100 MiB partition has too few, and
	// mkfs.fat picks FAT16 (which UEFI reads as well).
	fat := []string{"-F", "32", "-n", partition.EFI, devs[partition.EFI].Path()}
	if ss != partition.SectorSize {
		fat = fat[2:]
	}

	if out, err := exec.CommandContext(ctx, "mkfs.fat", fat...).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.fat %s: %w: %s", devs[partition.EFI].Path(), err, out)
	}

	return nil
}

// installGRUB writes the initramfs's GRUB to the disk: its boot sector and core image for BIOS
// (f, the BIOS partition), its UEFI program to the EFI partition.
func (o Options) installGRUB(f *os.File, parts []partition.Placed, devs map[string]partition.Device, ss int) error {
	grub := filepath.Join(o.Initramfs, metal.InitramfsGRUB)

	bootImg, err := os.ReadFile(filepath.Join(grub, "boot.img"))
	if err != nil {
		return fmt.Errorf("this initramfs carries no GRUB (rebuild the boot assets with `make boot`): %w", err)
	}

	coreImg, err := os.ReadFile(filepath.Join(grub, "core.img"))
	if err != nil {
		return err
	}

	bios := parts[slices.IndexFunc(parts, func(p partition.Placed) bool { return p.Name == partition.BIOS })]

	// GRUB's BIOS boot sector is for 512-byte sectors (as BIOSes are): a 4Kn disk boots UEFI.
	if ss == partition.SectorSize {
		if err = partition.InstallGRUB(f, bios, bootImg, coreImg); err != nil {
			return err
		}
	} else {
		o.Log("no GRUB for BIOS on a disk of %d-byte sectors: it boots with UEFI", ss)
	}

	if err = f.Sync(); err != nil {
		return err
	}

	efi, err := os.ReadFile(filepath.Join(grub, metal.GRUBEFIName))
	if err != nil {
		return fmt.Errorf("this initramfs carries no GRUB for UEFI (rebuild the boot assets with `make boot`): %w", err)
	}

	for _, m := range []string{"vfat", "nls_cp437", "nls_ascii"} { // FAT's default code page and character set
		if err = metal.LoadModule(m); err != nil {
			return err
		}
	}

	o.Log("writing GRUB for UEFI to %s: %s", partition.EFI, UEFIBootPath)

	return onPartition(partition.EFI, devs[partition.EFI].Path(), "vfat", func(dir string) error {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(UEFIBootPath)), 0o755); err != nil {
			return err
		}

		return os.WriteFile(filepath.Join(dir, UEFIBootPath), efi, 0o644)
	})
}

// encrypt formats the partitions the config encrypts as LUKS2 volumes and opens them (their
// filesystems go on the opened volumes), records STATE's encryption in META for the boot stage,
// and returns STATE's new salt for keys locked to it (nil without encryption). targets gets the
// device each filesystem is made on.
func (o Options) encrypt(ctx context.Context, devs map[string]partition.Device, targets map[string]string, signed []uki.Section) ([]byte, error) {
	for _, name := range []string{partition.Boot, partition.State, partition.Ephemeral} {
		targets[name] = devs[name].Path()
	}

	if len(o.Encryption) == 0 {
		return nil, nil
	}

	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}

	for _, m := range metal.EncryptionModules {
		if err := metal.LoadModule(m); err != nil {
			return nil, err
		}
	}

	for _, name := range []string{partition.State, partition.Ephemeral} {
		spec := o.Encryption[name]
		if spec == nil {
			continue
		}

		kinds := make([]string, 0, len(spec.Keys))
		for _, k := range spec.Keys {
			kinds = append(kinds, fmt.Sprintf("slot %d: %s", k.Slot, k.Kind()))
		}

		o.Log("encrypting %s (%s) with LUKS2, keys %s", name, devs[name].Path(), strings.Join(kinds, ", "))

		if signed != nil && o.tpmKeys() {
			o.Log("%s: TPM keys are sealed to PCR 7 and the PCR 11 values the UKI's PCR signing key signs", name)
		}

		env := encryption.Env{Label: name, NodeUUID: o.NodeUUID, Salt: salt}
		if signed != nil {
			// The node boots a signed UKI: its TPM keys are bound to what the PCR key signs.
			env.PCRSigning = func() (*rsa.PublicKey, []tpmseal.SignedPolicy, bool, error) { return uki.Booted(o.Initramfs) }
		}

		if err := (encryption.Cryptsetup{}).Format(ctx, devs[name].Path(), spec, env); err != nil {
			return nil, fmt.Errorf("encrypting %s: %w", name, err)
		}

		targets[name] = "/dev/mapper/" + encryption.MappedName(name)
	}

	if spec := o.Encryption[partition.State]; spec != nil {
		v, err := spec.Marshal()
		if err != nil {
			return nil, err
		}

		if err = meta.OpenPartition(devs[partition.Meta].Path()).Set(meta.StateEncryption, v); err != nil {
			return nil, fmt.Errorf("recording STATE's encryption in META: %w", err)
		}
	}

	return salt, nil
}

// writeSlot writes a slot's kernel and initramfs, or its unified kernel image (signed: its
// sections), and GRUB's menu on BOOT.
func writeSlot(boot, slot string, o Options, signed []uki.Section) error {
	dir := filepath.Join(boot, slot)
	for _, d := range []string{dir, filepath.Join(boot, "grub")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}

	if signed != nil {
		if err := uki.Build(filepath.Join(o.Initramfs, metal.InitramfsStub), signed, filepath.Join(dir, slots.SlotUKI)); err != nil {
			return fmt.Errorf("writing the unified kernel image: %w", err)
		}

		return o.writeMenu(boot, partition.GRUBSlot{Name: slot, UKI: true})
	}

	if err := copyFile(filepath.Join(o.Initramfs, metal.InitramfsKernel), filepath.Join(dir, "vmlinuz"), 0o600); err != nil {
		return err
	}

	out, err := os.OpenFile(filepath.Join(dir, "initramfs.img"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}

	if err = imager.WriteInitramfs(out, o.Initramfs, metal.InitramfsAdded...); err != nil {
		out.Close()

		return fmt.Errorf("writing the initramfs: %w", err)
	}

	if err = out.Close(); err != nil {
		return err
	}

	return o.writeMenu(boot, partition.GRUBSlot{Name: slot})
}

// writeMenu writes GRUB's menu on BOOT, booting slot; the keys upgrade images must be signed
// with go beside it when the boot assets carry them.
func (o Options) writeMenu(boot string, slot partition.GRUBSlot) error {
	if keys := filepath.Join(o.Initramfs, metal.InitramfsKeys); regularFile(keys) {
		if err := copyFile(keys, filepath.Join(boot, filepath.Base(metal.InitramfsKeys)), 0o644); err != nil {
			return err
		}
	}

	cfg := partition.GRUBConfig(slot.Name, []partition.GRUBSlot{slot}, strings.Join(o.Cmdline, " "))

	return os.WriteFile(filepath.Join(boot, "grub", "grub.cfg"), []byte(cfg), 0o600)
}

// bootedUKI is the UKI this node installs when it booted from a UKI with a PCR signature: its
// sections, of the kernel and initramfs this node booted and the stub's signature (checked to
// approve them); nil when the boot was of a kernel and initramfs, or unsigned.
func (o Options) bootedUKI() ([]uki.Section, error) {
	pkey, err := os.ReadFile(filepath.Join(o.Initramfs, uki.PublicKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}

	sig, err := os.ReadFile(filepath.Join(o.Initramfs, uki.SignatureFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}

	if !regularFile(filepath.Join(o.Initramfs, metal.InitramfsStub)) {
		return nil, errors.New("this node booted a signed UKI, and its initramfs carries no EFI stub to install one with: rebuild the boot assets with `make boot`")
	}

	kernel, err := uki.FileSection(".linux", filepath.Join(o.Initramfs, metal.InitramfsKernel))
	if err != nil {
		return nil, err
	}

	initrd, err := uki.StreamSection(".initrd", func(w io.Writer) error {
		return imager.WriteInitramfs(w, o.Initramfs, metal.InitramfsAdded...)
	})
	if err != nil {
		return nil, err
	}

	sections, err := uki.Signed(strings.Join(metal.DefaultKernelArgs, " "), kernel, initrd, pkey, sig)
	if err != nil {
		return nil, fmt.Errorf("this node booted a signed UKI, and its own UKI does not match the signature (the kernel's sha256 %x, the initramfs written back %d bytes, sha256 %x): %w", kernel.Digest, initrd.Size, initrd.Digest, err)
	}

	return sections, nil
}

// tpmKeys reports whether the config seals a system volume's key to the TPM.
func (o Options) tpmKeys() bool {
	for _, spec := range o.Encryption {
		for _, k := range spec.Keys {
			if k.TPM {
				return true
			}
		}
	}

	return false
}

// onPartition mounts a partition's device (filesystem fstype) in a temporary folder for fn,
// syncs and unmounts it.
func onPartition(name, dev, fstype string, fn func(dir string) error) error {
	dir, err := os.MkdirTemp("", "install-"+strings.ToLower(name))
	if err != nil {
		return err
	}
	defer os.Remove(dir)

	if err = unix.Mount(dev, dir, fstype, unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mounting %s: %w", dev, err)
	}

	err = fn(dir)
	unix.Sync()

	if uerr := unix.Unmount(dir, 0); uerr != nil && err == nil {
		err = fmt.Errorf("unmounting %s: %w", dev, uerr)
	}

	return err
}

// waitPartitions waits for the kernel to show the disk's n partitions and their device nodes.
func waitPartitions(ctx context.Context, disk string, n int) (map[string]partition.Device, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	for {
		devs, err := partition.Devices("/sys")
		if err != nil {
			return nil, err
		}

		found := partition.OnDisk(devs, disk)

		ready := len(found) == n
		for _, d := range found {
			if _, err := os.Stat(d.Path()); err != nil {
				ready = false
			}
		}

		if ready {
			return found, nil
		}

		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s's partitions did not appear (%d of %d)", disk, len(found), n)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Cmdline is the installed system's kernel arguments: this boot's, without what only
// a first boot uses (talos.config: the config is on STATE now) or the boot loader adds, with
// machine.install.extraKernelArgs.
func Cmdline(current string, extra []string) []string {
	var args []string

	for _, a := range strings.Fields(current) {
		key, _, _ := strings.Cut(a, "=")
		if key == "talos.config" || key == "BOOT_IMAGE" || key == "initrd" {
			continue
		}

		args = append(args, a)
	}

	return append(args, extra...)
}

func layoutText(parts []partition.Placed) string {
	var b []string
	for _, p := range parts {
		b = append(b, fmt.Sprintf("%s %d MiB", p.Name, p.Bytes()/partition.MiB))
	}

	return strings.Join(b, ", ")
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()

	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}

	if _, err = io.Copy(out, in); err != nil {
		out.Close()

		return err
	}

	return out.Close()
}

// copyTree copies the folders and regular files under src into dst, with their permissions.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}

		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}

		target := filepath.Join(dst, rel)

		fi, err := d.Info()
		if err != nil {
			return err
		}

		switch {
		case d.IsDir():
			return os.MkdirAll(target, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			return copyFile(p, target, fi.Mode().Perm())
		default:
			return errors.New(p + ": only folders and files are copied")
		}
	})
}

func regularFile(path string) bool {
	fi, err := os.Stat(path)

	return err == nil && fi.Mode().IsRegular()
}
