package partition

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// BIOS boot with GRUB (Debian's grub-pc-bin): the disk's first sector runs GRUB's boot.img,
// which loads core.img from the BIOS partition; core.img (made by grub-mkimage with every
// module it needs, see imager) reads grub/grub.cfg on BOOT. This is what grub-bios-setup does
// for a GPT disk, without Reed-Solomon codes (its --no-rs-codes).

// Offsets in GRUB's i386-pc images.
const (
	grubKernelSector = 0x5c  // boot.img: LBA of core.img's first sector (8 bytes)
	grubDriveCheck   = 0x66  // boot.img: a jump skipped for hard disks (two NOPs)
	mbrCodeEnd       = 0x1b8 // boot code ends where the disk signature and partition table begin
	blocklistStart   = 0x1f4 // core.img's first sector: the blocklist of the rest (start, length)
)

// InstallGRUB writes boot.img's code into the disk's first sector (keeping its partition
// table) and core.img into the BIOS partition, each pointing at where the next is.
func InstallGRUB(disk interface {
	io.ReaderAt
	io.WriterAt
}, bios Placed, bootImg, coreImg []byte) error {
	if len(bootImg) != SectorSize {
		return fmt.Errorf("GRUB boot.img is %d bytes, want %d", len(bootImg), SectorSize)
	}

	sectors := (int64(len(coreImg)) + SectorSize - 1) / SectorSize
	if sectors < 2 || sectors > bios.Last-bios.First+1 || sectors-1 > 0xffff {
		return fmt.Errorf("GRUB core.img of %d bytes does not fit the %d bytes of the BIOS partition", len(coreImg), bios.Bytes())
	}

	core := make([]byte, sectors*SectorSize)
	copy(core, coreImg)
	binary.LittleEndian.PutUint64(core[blocklistStart:], uint64(bios.First+1))
	binary.LittleEndian.PutUint16(core[blocklistStart+8:], uint16(sectors-1))

	if _, err := disk.WriteAt(core, bios.Offset()); err != nil {
		return fmt.Errorf("writing GRUB's core image: %w", err)
	}

	mbr := make([]byte, SectorSize)
	if _, err := disk.ReadAt(mbr, 0); err != nil {
		return err
	}

	copy(mbr[:mbrCodeEnd], bootImg[:mbrCodeEnd])
	binary.LittleEndian.PutUint64(mbr[grubKernelSector:], uint64(bios.First))
	mbr[grubDriveCheck], mbr[grubDriveCheck+1] = 0x90, 0x90

	if _, err := disk.WriteAt(mbr, 0); err != nil {
		return fmt.Errorf("writing GRUB's boot sector: %w", err)
	}

	return nil
}

// GRUBPrefix is where core.img finds its config: BOOT is the third GPT partition.
const GRUBPrefix = "(hd0,gpt3)/grub"

// GRUBSlot is a slot in GRUB's menu: a folder on BOOT with vmlinuz and initramfs.img, or with
// uki.efi (UKI), a unified kernel image GRUB starts on UEFI (its stub measures it into PCR 11;
// the kernel arguments GRUB passes it replace its own, and name the slot as BOOT_IMAGE).
type GRUBSlot struct {
	Name string
	UKI  bool
	// Args are the slot's own kernel arguments, after the menu's shared ones: the extra kernel
	// arguments of the schematic its image carries, which go and come with the slot.
	Args []string
}

// GRUBConfig is grub/grub.cfg on BOOT: a menu of the slots booting the default one, on the
// serial console and the screen.
func GRUBConfig(def string, slots []GRUBSlot, cmdline string) string {
	var b strings.Builder

	fmt.Fprintf(&b, "set default=%q\nset timeout=0\n", def)
	b.WriteString("serial --unit=0 --speed=115200\nterminal_input console serial\nterminal_output console serial\n")

	for _, s := range slots {
		fmt.Fprintf(&b, "\nmenuentry %q {\n\techo \"Loading slot %s\"\n", s.Name, s.Name)

		args := strings.Join(append(strings.Fields(cmdline), s.Args...), " ")

		if s.UKI {
			fmt.Fprintf(&b, "\tchainloader /%s/uki.efi BOOT_IMAGE=/%s/uki.efi %s\n}\n", s.Name, s.Name, args)
		} else {
			fmt.Fprintf(&b, "\tlinux /%s/vmlinuz %s\n\tinitrd /%s/initramfs.img\n}\n", s.Name, args, s.Name)
		}
	}

	return b.String()
}
