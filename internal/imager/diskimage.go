package imager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
)

// DiskImageName is the boot assets' disk image (upstream's name for it): a disk as a node
// installs it, with no config on STATE, so the machine boots it into maintenance mode.
const DiskImageName = "metal-amd64.raw"

// diskImageInputs are what the disk image holds: slot A's kernel and initramfs, GRUB's BIOS
// boot sector and core image, GRUB for UEFI, the image keys (optional), and the kernel
// arguments GRUB boots slot A with (metal.DefaultKernelArgs when nil).
type diskImageInputs struct {
	kernel, initramfs, bootImg, coreImg, efi, keys string
	kernelArgs                                     []string
}

// buildDiskImage writes the disk image at out (sparse), without root: each partition's
// filesystem is made in a file of its own (mkfs.xfs -p populates XFS from a prototype,
// mtools writes into FAT) and copied to its place after upstream's GPT; GRUB boots slot A.
func buildDiskImage(in diskImageInputs, out string) error {
	size := partition.MinSize(partition.Layout)

	parts, err := partition.Plan(partition.Layout, size)
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp(filepath.Dir(out), ".disk-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	part := func(name string) partition.Placed {
		return parts[slices.IndexFunc(parts, func(p partition.Placed) bool { return p.Name == name })]
	}

	files, err := partitionFiles(in, tmp, part)
	if err != nil {
		return err
	}

	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()

	if err = f.Truncate(size); err != nil {
		return err
	}

	if err = partition.Write(f, size, parts); err != nil {
		return err
	}

	for _, p := range parts {
		if src, ok := files[p.Name]; ok {
			if err = CopySparse(f, p.Offset(), src); err != nil {
				return err
			}
		}
	}

	bootImg, err := os.ReadFile(in.bootImg)
	if err != nil {
		return err
	}

	coreImg, err := os.ReadFile(in.coreImg)
	if err != nil {
		return err
	}

	if err = partition.InstallGRUB(f, part(partition.BIOS), bootImg, coreImg); err != nil {
		return err
	}

	if err = f.Close(); err != nil {
		return err
	}

	return os.Rename(f.Name(), out)
}

// partitionFiles makes the filesystems of BOOT (slot A, GRUB's menu, the keys), STATE,
// EPHEMERAL and EFI (GRUB for UEFI), each in a file of its own in tmp, and names the files by
// partition.
func partitionFiles(in diskImageInputs, tmp string, part func(name string) partition.Placed) (map[string]string, error) {
	// BOOT: slot A and GRUB's menu, with the image's kernel arguments.
	args := in.kernelArgs
	if args == nil {
		args = metal.DefaultKernelArgs
	}

	cfg := filepath.Join(tmp, "grub.cfg")
	if err := os.WriteFile(cfg, []byte(partition.GRUBConfig("A", []partition.GRUBSlot{{Name: "A"}}, strings.Join(args, " "))), 0o600); err != nil {
		return nil, err
	}

	proto := fmt.Sprintf("boot\n0 0\nd--755 0 0\nA d--700 0 0\nvmlinuz ---600 0 0 %s\ninitramfs.img ---600 0 0 %s\n$\ngrub d--700 0 0\ngrub.cfg ---600 0 0 %s\n$\n",
		in.kernel, in.initramfs, cfg)
	if in.keys != "" {
		proto += fmt.Sprintf("%s ---644 0 0 %s\n", filepath.Base(metal.InitramfsKeys), in.keys)
	}

	proto += "$\n"

	files := map[string]string{}

	for _, p := range []partition.Placed{part(partition.Boot), part(partition.State), part(partition.Ephemeral)} {
		files[p.Name] = filepath.Join(tmp, p.Name)

		var extra []string
		if p.Name == partition.Boot {
			protoFile := filepath.Join(tmp, "boot.proto")
			if err := os.WriteFile(protoFile, []byte(proto), 0o600); err != nil {
				return nil, err
			}

			extra = []string{"-p", protoFile}
		}

		if err := sizedFile(files[p.Name], p.Bytes()); err != nil {
			return nil, err
		}

		if err := partition.FormatXFS(context.Background(), files[p.Name], p.Name, extra...); err != nil {
			return nil, err
		}
	}

	efi := part(partition.EFI)
	files[partition.EFI] = filepath.Join(tmp, partition.EFI)

	if err := sizedFile(files[partition.EFI], efi.Bytes()); err != nil {
		return nil, err
	}

	for _, args := range [][]string{{"mkfs.fat", "-F", "32", "-n", partition.EFI, files[partition.EFI]}, {"mmd", "-i", files[partition.EFI], "::/EFI", "::/EFI/BOOT"}, {"mcopy", "-i", files[partition.EFI], in.efi, "::/EFI/BOOT/BOOTX64.EFI"}} {
		if o, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %w: %s (install Debian's dosfstools and mtools)", args[0], err, o)
		}
	}

	return files, nil
}

// sizedFile makes a new file of size bytes (sparse), for a filesystem.
func sizedFile(file string, size int64) error {
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return err
	}

	return os.Truncate(file, size)
}

// CopySparse writes src into dst at off, leaving src's holes and zero MiBs as holes: only the
// data regions src's filesystem reports are read.
func CopySparse(dst *os.File, off int64, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()

	buf, zero := make([]byte, 1<<20), make([]byte, 1<<20)

	for pos := int64(0); ; {
		start, err := unix.Seek(int(in.Fd()), pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only holes after pos
		}

		if err != nil {
			return err
		}

		end, err := unix.Seek(int(in.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return err
		}

		for pos = start; pos < end; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
				if _, werr := dst.WriteAt(buf[:n], off+pos); werr != nil {
					return werr
				}
			}

			pos += int64(n)

			if err == io.EOF {
				return nil
			}

			if err != nil {
				return err
			}
		}
	}
}
