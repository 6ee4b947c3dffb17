package imager

import (
	"debug/pe"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/talos-go/talos/internal/metal"
)

// UKIName is the boot assets' unified kernel image (upstream's name for it).
const UKIName = "metal-amd64-uki.efi"

// UKIStub is systemd's EFI stub (Debian's systemd-boot-efi): the UEFI program a unified kernel
// image is made of, which starts the kernel in its .linux section with the initramfs in .initrd
// and the arguments in .cmdline.
var UKIStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// buildUKI makes a unified kernel image of the kernel, the initramfs and the default kernel
// arguments: the stub with .osrel, .cmdline, .linux and .initrd added by objcopy (Debian's
// binutils) after its own sections, each at the stub's section alignment.
func buildUKI(kernel, initramfs, out string) error {
	if _, err := os.Stat(UKIStub); err != nil {
		return fmt.Errorf("no systemd EFI stub for the unified kernel image (%s): install Debian's systemd-boot-efi (apt-get install systemd-boot-efi)", UKIStub)
	}

	if _, err := exec.LookPath("objcopy"); err != nil {
		return errors.New("no objcopy for the unified kernel image: install Debian's binutils (apt-get install binutils)")
	}

	f, err := pe.Open(UKIStub)
	if err != nil {
		return fmt.Errorf("reading the EFI stub: %w", err)
	}

	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		f.Close()

		return errors.New("the EFI stub is not a 64-bit PE")
	}

	align, next := uint64(oh.SectionAlignment), uint64(0)
	for _, s := range f.Sections {
		next = max(next, uint64(s.VirtualAddress)+uint64(max(s.VirtualSize, s.Size)))
	}

	f.Close()

	dir, err := os.MkdirTemp(filepath.Dir(out), ".uki-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	osrel := filepath.Join(dir, "os-release")
	cmdline := filepath.Join(dir, "cmdline")

	if err = os.WriteFile(osrel, []byte("NAME=Talos\nID=talos\nPRETTY_NAME=Talos (metal)\n"), 0o644); err != nil {
		return err
	}

	if err = os.WriteFile(cmdline, []byte(strings.Join(metal.DefaultKernelArgs, " ")), 0o644); err != nil {
		return err
	}

	args := []string{}

	for _, s := range []struct{ name, file string }{{".osrel", osrel}, {".cmdline", cmdline}, {".linux", kernel}, {".initrd", initramfs}} {
		fi, err := os.Stat(s.file)
		if err != nil {
			return err
		}

		vma := (next + align - 1) / align * align
		args = append(args, "--add-section", s.name+"="+s.file, "--change-section-vma", fmt.Sprintf("%s=0x%x", s.name, vma))
		next = vma + uint64(fi.Size())
	}

	tmp := filepath.Join(dir, "uki.efi")

	if b, err := exec.Command("objcopy", append(args, UKIStub, tmp)...).CombinedOutput(); err != nil {
		return fmt.Errorf("objcopy (the unified kernel image): %w: %s", err, b)
	}

	return os.Rename(tmp, out)
}
