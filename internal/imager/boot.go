package imager

import (
	"bufio"
	"crypto/rsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/uki"
)

// BootOptions are the inputs of the metal boot assets.
type BootOptions struct {
	KernelRoot string // an extracted Debian linux-image package: boot/vmlinuz-*, lib/modules/*
	Rootfs     string // the node image, /rootfs.sqsh in the initramfs; its machined is /init
	GRUBDir    string // GRUB's i386-pc modules and boot.img (Debian's grub-pc-bin)
	GRUBEFIDir string // GRUB's x86_64-efi modules (Debian's grub-efi-amd64-bin)
	Keys       string // PEM public keys an installed node trusts for its upgrade images (optional)
	// PCRKey is the PCR signing key (PEM RSA) the UKI's .pcrsig is signed with (optional): a
	// node booted from it seals its TPM disk keys to PCR 11 values this key signs.
	PCRKey string
	// Platforms are the platforms (besides metal) whose disk images are built too, each with
	// its kernel arguments in its format (ParsePlatforms).
	Platforms []string
	// Compress also writes each disk image but GCP's tarball (gzip already) compressed as
	// upstream ships them, <name>.zst beside it; the uncompressed ones stay, for QEMU.
	Compress bool
	Out      string // folder for vmlinuz and initramfs.img
}

// Where Debian's grub-pc-bin and grub-efi-amd64-bin put GRUB's BIOS and UEFI modules.
const (
	DefaultGRUBDir    = "/usr/lib/grub/i386-pc"
	DefaultGRUBEFIDir = "/usr/lib/grub/x86_64-efi"
)

// grubModules are built into core.img: what reads BOOT and runs partition.GRUBConfig's menu.
var grubModules = []string{"biosdisk", "part_gpt", "xfs", "normal", "configfile", "linux", "echo", "test", "serial", "terminal"}

// BootAssets is what BuildBoot wrote.
type BootAssets struct {
	Release             string // the kernel's release, e.g. 6.1.0-56-cloud-amd64
	Kernel, Initramfs   string
	ISO                 string // the first boot's medium: GRUB booting the kernel and initramfs
	UKI                 string // the same as a unified kernel image (UEFI)
	DiskImage           string // a disk as a node installs it, without a config (DiskImageName)
	Cmdline             string // the file of the default kernel arguments
	KernelSize, InitrdN int64  // bytes
	ISOSize, UKISize    int64
	DiskImageSize       int64 // its size (a sparse file: most of it takes no space)
	// PlatformImages are the other platforms' disk images, by platform: path and size.
	PlatformImages map[string]PlatformImageFile
	// Compressed are the disk images compressed (BootOptions.Compress), metal's first.
	Compressed []PlatformImageFile
	Modules    []string
}

// PlatformImageFile is one platform's disk image as written.
type PlatformImageFile struct {
	Path string
	Size int64 // bytes, of the file (holes included)
}

// bootModules are the modules the initramfs carries: metal.BootModules, the drivers of the
// devices a QEMU or cloud machine boots with, those machined loads when the config asks
// (bonding, 8021q for VLANs, bridge, wireguard, dummy, and softdog: the watchdog a
// WatchdogTimerConfig can drive where the machine has none the kernel knows), nf_tables and its conntrack match for the ingress
// firewall, XFS for an installed disk's partitions, FAT for its EFI partition, dm-crypt and
// its crypto for encrypted ones (metal.EncryptionModules), ISO 9660 for
// talos.config=metal-iso, UDF for Azure's provisioning disc, and the IDE controller and CD-ROM driver nocloud's cidata drive sits
// on under Proxmox (ata_piix, sr_mod), and the clouds' own devices: Hyper-V's bus, disk and
// network (Azure), ENA (AWS's Nitro network) and gVNIC (GCP's), each with what it depends on.
// A module loads only when the machine has its device (by modalias).
var bootModules = append(append(slices.Clone(metal.BootModules),
	"virtio_net", "virtio_blk", "virtio_scsi", "virtio_console", "virtio_rng", "e1000", "e1000e", "ahci", "nvme", "sd_mod", "ata_piix", "sr_mod",
	"bonding", "8021q", "bridge", "wireguard", "dummy", "softdog", "nf_tables", "nft_ct", "xfs", "vfat", "nls_cp437", "nls_ascii", "isofs", "udf",
	"hv_vmbus", "hv_storvsc", "hv_netvsc", "hv_utils", "ena", "gve"), metal.EncryptionModules...)

// BuildBoot writes the kernel and an initramfs (uncompressed newc cpio: the node image in it
// is compressed already, and the kernel unpacks it fastest so) with machined as /init, the node
// image and the boot's modules. Same inputs give the same bytes.
func BuildBoot(opts BootOptions) (BootAssets, error) {
	var a BootAssets

	kernels, _ := filepath.Glob(filepath.Join(opts.KernelRoot, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return a, fmt.Errorf("want one boot/vmlinuz-* in %s, found %d: extract one Debian linux-image package there (make boot does)", opts.KernelRoot, len(kernels))
	}

	a.Release = strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	modDir := filepath.Join(opts.KernelRoot, "lib", "modules", a.Release)

	a.Initramfs = filepath.Join(opts.Out, "initramfs.img")
	if err := a.writeKernel(opts.Out, kernels[0]); err != nil {
		return a, err
	}

	deps, err := readModulesDep(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return a, err
	}

	files, modules := bootModuleFiles(deps)
	a.Modules = modules

	grubDir := opts.GRUBDir
	if grubDir == "" {
		grubDir = DefaultGRUBDir
	}

	core := a.Initramfs + ".core.tmp"
	if err := grubCore(grubDir, core); err != nil {
		return a, err
	}
	defer os.Remove(core)

	efiDir := opts.GRUBEFIDir
	if efiDir == "" {
		efiDir = DefaultGRUBEFIDir
	}

	efi := a.Initramfs + ".efi.tmp"
	if err := grubEFI(efiDir, efi); err != nil {
		return a, err
	}
	defer os.Remove(efi)

	out, err := os.Create(a.Initramfs + ".tmp")
	if err != nil {
		return a, err
	}
	defer os.Remove(out.Name())

	w := newCpio(bufio.NewWriterSize(out, 1<<20))
	dir := path.Join(strings.TrimPrefix(metal.InitramfsModules, "/"), a.Release)

	for _, d := range []string{"dev", "disk", "lib", "lib/modules", dir, "proc", "sys"} {
		w.dir(d)
	}

	w.device("dev/console", 0o600, 5, 1)
	w.modules(dir, modDir, files, deps)

	// /init is the node image's own machined, so the node runs the one copy the kernel has in
	// memory already (internal/metal binds it over the image's).
	machined := a.Initramfs + ".init.tmp"
	if err = extractInit(opts.Rootfs, machined); err != nil {
		return a, err
	}
	defer os.Remove(machined)

	w.file("init", machined, 0o755)
	w.file(strings.TrimPrefix(metal.InitramfsImage, "/"), opts.Rootfs, 0o644)

	if err = w.installFiles(a.Kernel, grubDir, core, efi, opts.Keys); err != nil {
		return a, err
	}

	if err = w.close(); err != nil {
		return a, err
	}

	if err = out.Close(); err != nil {
		return a, err
	}

	if err = os.Rename(out.Name(), a.Initramfs); err != nil {
		return a, err
	}

	err = a.buildImages(opts, grubDir, core, efi)

	return a, err
}

// writeKernel copies the kernel to out, and its default arguments beside it.
func (a *BootAssets) writeKernel(out, kernel string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	a.Kernel = filepath.Join(out, "vmlinuz")

	a.Cmdline = filepath.Join(out, "cmdline")
	if err := os.WriteFile(a.Cmdline, []byte(strings.Join(metal.DefaultKernelArgs, " ")+"\n"), 0o644); err != nil {
		return err
	}

	if err := os.Remove(a.Kernel); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}

	return copyFile(kernel, a.Kernel)
}

// bootModuleFiles are the files of bootModules and of the modules they depend on (paths under
// the kernel's modules folder, sorted), and the boot modules this kernel has as modules.
func bootModuleFiles(deps modulesDep) (files, modules []string) {
	for _, name := range bootModules {
		p, ok := deps.paths[name]
		if !ok {
			continue // built into this kernel
		}

		for _, f := range append([]string{p}, deps.deps[name]...) {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}

		modules = append(modules, name)
	}

	slices.Sort(files)

	return files, modules
}

// modules adds the module files (under modDir) at dir, and their index.
func (w *cpio) modules(dir, modDir string, files []string, deps modulesDep) {
	for _, f := range files {
		for _, parent := range parents(path.Dir(f)) {
			w.dir(path.Join(dir, parent))
		}

		w.file(path.Join(dir, f), filepath.Join(modDir, f), 0o644)
	}

	// The index files for the carried modules only: modprobe's view of this initramfs.
	w.bytes(path.Join(dir, "modules.dep"), deps.subset(files), 0o644)
	w.bytes(path.Join(dir, "modules.alias"), aliasesFor(filepath.Join(modDir, "modules.alias"), files), 0o644)
	w.file(path.Join(dir, "modules.builtin"), filepath.Join(modDir, "modules.builtin"), 0o644)
}

// installFiles adds what the node installs to disk besides this initramfs: the kernel, GRUB
// (its boot.img from grubDir, the core and EFI images built), systemd's EFI stub and the image
// keys (keys, when given). The files are read when the archive is closed.
func (w *cpio) installFiles(kernel, grubDir, core, efi, keys string) error {
	w.dir("boot")
	w.dir("boot/grub")
	w.file(strings.TrimPrefix(metal.InitramfsKernel, "/"), kernel, 0o644)
	w.file(strings.TrimPrefix(metal.InitramfsGRUB, "/")+"/boot.img", filepath.Join(grubDir, "boot.img"), 0o644)
	w.file(strings.TrimPrefix(metal.InitramfsGRUB, "/")+"/core.img", core, 0o644)
	w.file(strings.TrimPrefix(metal.InitramfsGRUB, "/")+"/"+metal.GRUBEFIName, efi, 0o644)

	// systemd's EFI stub: a node booted from the UKI installs a UKI of this initramfs.
	if _, err := os.Stat(uki.Stub); err != nil {
		return fmt.Errorf("no systemd EFI stub (%s): install Debian's systemd-boot-efi (apt-get install systemd-boot-efi)", uki.Stub)
	}

	w.file(strings.TrimPrefix(metal.InitramfsStub, "/"), uki.Stub, 0o644)

	if keys != "" {
		if _, err := LoadPublicKeys(keys); err != nil {
			return fmt.Errorf("--keys: %w", err)
		}

		w.file(strings.TrimPrefix(metal.InitramfsKeys, "/"), keys, 0o644)
	}

	return nil
}

// buildImages builds the images of the kernel and initramfs: the ISO, the UKI (signed with
// opts.PCRKey's PCR policy when given) and the disk image, and records the assets' sizes.
func (a *BootAssets) buildImages(opts BootOptions, grubDir, core, efi string) error {
	a.ISO = filepath.Join(opts.Out, ISOName)
	if err := buildISO(a.Kernel, a.Initramfs, a.ISO); err != nil {
		return err
	}

	var pcrKey *rsa.PrivateKey
	if opts.PCRKey != "" {
		var err error
		if pcrKey, err = LoadPCRKey(opts.PCRKey); err != nil {
			return fmt.Errorf("--pcr-key: %w", err)
		}
	}

	a.UKI = filepath.Join(opts.Out, UKIName)
	if err := buildUKI(a.Kernel, a.Initramfs, pcrKey, a.UKI); err != nil {
		return err
	}

	a.DiskImage = filepath.Join(opts.Out, DiskImageName)
	in := diskImageInputs{kernel: a.Kernel, initramfs: a.Initramfs, bootImg: filepath.Join(grubDir, "boot.img"), coreImg: core, efi: efi, keys: opts.Keys}

	if err := buildDiskImage(in, a.DiskImage); err != nil {
		return fmt.Errorf("the disk image: %w", err)
	}

	a.PlatformImages = map[string]PlatformImageFile{}

	for _, name := range opts.Platforms {
		p, err := buildPlatformImage(in, name, opts.Out)
		if err != nil {
			return fmt.Errorf("the %s disk image: %w", name, err)
		}

		fi, err := os.Stat(p)
		if err != nil {
			return err
		}

		a.PlatformImages[name] = PlatformImageFile{Path: p, Size: fi.Size()}
	}

	if opts.Compress {
		images := []string{a.DiskImage}
		for _, name := range opts.Platforms {
			if p := a.PlatformImages[name].Path; !strings.HasSuffix(p, ".gz") {
				images = append(images, p)
			}
		}

		for _, p := range images {
			out, size, err := compressZstd(p)
			if err != nil {
				return err
			}

			a.Compressed = append(a.Compressed, PlatformImageFile{Path: out, Size: size})
		}
	}

	for p, n := range map[string]*int64{a.Kernel: &a.KernelSize, a.Initramfs: &a.InitrdN, a.ISO: &a.ISOSize, a.UKI: &a.UKISize, a.DiskImage: &a.DiskImageSize} {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}

		*n = fi.Size()
	}

	return nil
}

// extractInit copies the node image's machined (InitPath) to out with Debian's unsquashfs.
func extractInit(rootfs, out string) error {
	if _, err := exec.LookPath("unsquashfs"); err != nil {
		return errors.New("no unsquashfs to take machined from the node image: install Debian's squashfs-tools")
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()

	var stderr strings.Builder

	cmd := exec.Command("unsquashfs", "-cat", rootfs, strings.TrimPrefix(InitPath, "/"))
	cmd.Stdout, cmd.Stderr = f, &stderr

	if err = cmd.Run(); err != nil {
		return fmt.Errorf("taking %s from the node image %s: %w: %s (rebuild it with `make rootfs`)", InitPath, rootfs, err, strings.TrimSpace(stderr.String()))
	}

	return f.Close()
}

// ISOName is the first boot's ISO in the boot assets' folder (upstream's name for it).
const ISOName = "metal-amd64.iso"

// isoMenu is the ISO's GRUB menu: the kernel and initramfs with the default kernel arguments,
// on the serial console and the screen. The node boots into maintenance mode (or fetches
// talos.config= when the arguments are edited in GRUB) and installs itself to its disk.
func isoMenu() string {
	return "set default=0\nset timeout=0\nserial --unit=0 --speed=115200\nterminal_input console serial\nterminal_output console serial\n\n" +
		"menuentry \"Talos (metal)\" {\n\tlinux /boot/vmlinuz " + strings.Join(metal.DefaultKernelArgs, " ") +
		"\n\tinitrd /boot/initramfs.img\n}\n"
}

// buildISO makes an ISO of the kernel and initramfs that boots with BIOS and UEFI (El Torito,
// and hybrid for a USB stick) with Debian's grub-mkrescue (GRUB from both of Debian's GRUB
// packages), xorriso and mtools, its dates and identifiers fixed.
func buildISO(kernel, initramfs, out string) error {
	for tool, pkg := range map[string]string{"xorriso": "xorriso", "mformat": "mtools"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("no %s to make the ISO: install Debian's %s (apt-get install %s)", tool, pkg, pkg)
		}
	}

	stage, err := os.MkdirTemp(filepath.Dir(out), ".iso-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)

	if err = os.MkdirAll(filepath.Join(stage, "boot", "grub"), 0o755); err != nil {
		return err
	}

	for src, name := range map[string]string{kernel: "vmlinuz", initramfs: "initramfs.img"} {
		if err = os.Link(src, filepath.Join(stage, "boot", name)); err != nil {
			return fmt.Errorf("staging the ISO: %w", err)
		}
	}

	if err = os.WriteFile(filepath.Join(stage, "boot", "grub", "grub.cfg"), []byte(isoMenu()), 0o644); err != nil {
		return err
	}

	tmp := out + ".tmp"

	// Every date in the ISO (volume, files, folders) fixed: this grub-mkrescue ignores
	// SOURCE_DATE_EPOCH, and what follows "--" are xorriso's own commands.
	const epoch = "1970010100000000"

	// The GPT's identifiers come from the fixed volume date; mtools' FAT image for UEFI takes
	// its dates from SOURCE_DATE_EPOCH, its serial number is zeroed after.
	cmd := exec.Command("grub-mkrescue", "-o", tmp, stage, "--",
		"-volume_date", "uuid", epoch, "-volume_date", "c", epoch, "-volume_date", "m", epoch,
		"-volume_date", "all_file_dates", epoch, "-alter_date_r", "b", epoch, "/", "--", "-alter_date_r", "c", epoch, "/", "--",
		"-boot_image", "any", "gpt_disk_guid=volume_date_uuid")
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")

	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)

		return fmt.Errorf("grub-mkrescue: %w: %s", err, b)
	}

	if err = zeroFATSerial(tmp); err != nil {
		os.Remove(tmp)

		return err
	}

	return os.Rename(tmp, out)
}

// zeroFATSerial zeroes the volume serial number of the first FAT12/16 boot sector in the ISO:
// the UEFI boot image grub-mkrescue makes with mformat, which picks the serial at random.
func zeroFATSerial(iso string) error {
	f, err := os.OpenFile(iso, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()

	const volumeID, fsType = 0x27, 0x36 // offsets in a FAT12/16 boot sector

	sector := make([]byte, 512)

	for off := int64(0); ; off += int64(len(sector)) {
		if _, err = f.ReadAt(sector, off); err != nil {
			return fmt.Errorf("the ISO holds no UEFI boot image (is Debian's grub-efi-amd64-bin installed?): %w", err)
		}

		kind := string(sector[fsType : fsType+8])
		if sector[510] != 0x55 || sector[511] != 0xaa || (kind != "FAT12   " && kind != "FAT16   ") {
			continue
		}

		if _, err = f.WriteAt(make([]byte, 4), off+volumeID); err != nil {
			return err
		}

		return f.Close()
	}
}

// grubCore makes GRUB's core.img for BIOS boot from an installed disk: the modules built in, its
// prefix BOOT's grub folder.
func grubCore(dir, out string) error {
	if _, err := os.Stat(filepath.Join(dir, "boot.img")); err != nil {
		return fmt.Errorf("no GRUB BIOS images in %s: install Debian's grub-pc-bin (apt-get install grub-pc-bin): %w", dir, err)
	}

	args := append([]string{"-O", "i386-pc", "-d", dir, "-o", out, "-p", partition.GRUBPrefix}, grubModules...)
	if b, err := exec.Command("grub-mkimage", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("grub-mkimage (Debian's grub-pc-bin): %w: %s", err, b)
	}

	return nil
}

// grubEFIModules are built into the UEFI GRUB: what reads BOOT and runs partition.GRUBConfig's
// menu (the BIOS image's, with UEFI's disk access built in), and regexp for grubEFIConfig.
var grubEFIModules = []string{"part_gpt", "xfs", "normal", "configfile", "linux", "chain", "echo", "test", "serial", "terminal", "efi_gop", "regexp"}

// grubEFIConfig is built into the UEFI GRUB: BOOT is on the disk the firmware loaded GRUB from
// ($cmdpath, its EFI partition), whichever GRUB's number for it (a USB stick or another disk
// may come first).
const grubEFIConfig = `regexp --set=1:disk '^\(([^,)]+)' "$cmdpath"
set root="($disk,gpt3)"
set prefix="($disk,gpt3)/grub"
`

// grubEFI makes GRUB's UEFI program for an installed disk (EFI/BOOT/BOOTX64.EFI on its EFI
// partition): the modules built in, its prefix BOOT's grub folder on its own disk.
func grubEFI(dir, out string) error {
	if _, err := os.Stat(filepath.Join(dir, "linux.mod")); err != nil {
		return fmt.Errorf("no GRUB UEFI modules in %s: install Debian's grub-efi-amd64-bin (apt-get install grub-efi-amd64-bin): %w", dir, err)
	}

	early := out + ".cfg"
	if err := os.WriteFile(early, []byte(grubEFIConfig), 0o644); err != nil {
		return err
	}
	defer os.Remove(early)

	args := append([]string{"-O", "x86_64-efi", "-d", dir, "-o", out, "-c", early, "-p", partition.GRUBPrefix}, grubEFIModules...)
	if b, err := exec.Command("grub-mkimage", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("grub-mkimage (Debian's grub-efi-amd64-bin): %w: %s", err, b)
	}

	return nil
}

// parents lists a relative folder and its parents, outermost first ("a/b" → "a", "a/b").
func parents(dir string) []string {
	if dir == "." || dir == "" {
		return nil
	}

	return append(parents(path.Dir(dir)), dir)
}

type modulesDep struct {
	paths map[string]string   // name → path
	deps  map[string][]string // name → dependency paths
	lines map[string]string   // path → its modules.dep line
}

func readModulesDep(file string) (modulesDep, error) {
	d := modulesDep{paths: map[string]string{}, deps: map[string][]string{}, lines: map[string]string{}}

	b, err := os.ReadFile(file)
	if err != nil {
		return d, fmt.Errorf("the kernel package has no modules.dep: %w", err)
	}

	for line := range strings.Lines(string(b)) {
		p, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}

		name := strings.ReplaceAll(strings.TrimSuffix(path.Base(p), ".ko"), "-", "_")
		d.paths[name], d.deps[name], d.lines[p] = p, strings.Fields(rest), strings.TrimSpace(line)
	}

	return d, nil
}

func (d modulesDep) subset(files []string) []byte {
	var b strings.Builder

	for _, f := range files {
		b.WriteString(d.lines[f] + "\n")
	}

	return []byte(b.String())
}

// aliasesFor keeps the lines of modules.alias whose module is carried.
func aliasesFor(file string, files []string) []byte {
	names := map[string]bool{}
	for _, f := range files {
		names[strings.ReplaceAll(strings.TrimSuffix(path.Base(f), ".ko"), "-", "_")] = true
	}

	b, _ := os.ReadFile(file)

	var out strings.Builder

	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && names[f[2]] {
			out.WriteString(line)
		}
	}

	return []byte(out.String())
}

// bootMain is `imager boot`.
func bootMain(args []string, stdout io.Writer) error {
	var opts BootOptions

	fs := flag.NewFlagSet("boot", flag.ContinueOnError)
	fs.StringVar(&opts.KernelRoot, "kernel", "", "folder holding an extracted Debian linux-image package")
	fs.StringVar(&opts.Rootfs, "rootfs", "", "the node image (imager rootfs)")
	fs.StringVar(&opts.GRUBDir, "grub", DefaultGRUBDir, "GRUB's i386-pc folder (Debian's grub-pc-bin)")
	fs.StringVar(&opts.Keys, "keys", "", "PEM public keys an installed node trusts for upgrade images (imager keygen's .pub)")
	fs.StringVar(&opts.PCRKey, "pcr-key", "", "PEM RSA key signing the UKI's PCR 11 values (imager pcr-keygen, or talosctl gen secureboot pcr)")
	fs.StringVar(&opts.Out, "out", "", "output folder")
	fs.BoolVar(&opts.Compress, "compress", false, "also write the disk images compressed as upstream ships them (<name>.zst beside each; GCP's tarball is gzip already)")

	var platforms []string

	fs.Func("platform", "also build these platforms' disk images (comma-separated or repeated; all for every one): "+strings.Join(platform.Known, ", "), func(v string) error {
		platforms = append(platforms, v)

		return nil
	})

	if err := fs.Parse(args); err != nil {
		return err
	}

	if opts.KernelRoot == "" || opts.Rootfs == "" || opts.Out == "" {
		return errors.New("usage: imager boot --kernel DIR --rootfs FILE.sqsh [--keys FILE.pub] [--pcr-key FILE.pem] [--platform NAME,...] [--compress] --out DIR")
	}

	var err error
	if opts.Platforms, err = ParsePlatforms(platforms); err != nil {
		return err
	}

	a, err := BuildBoot(opts)
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "kernel %s: %s, %.1f MB\ninitramfs %s: %.1f MB (machined as /init, the node image, %d modules for %s)\nISO %s: %.1f MB (GRUB, BIOS and UEFI boot)\nUKI %s: %.1f MB (UEFI)\ndisk image %s: %.1f MB, sparse (boots into maintenance mode)\nkernel arguments %s: %s\n",
		a.Release, a.Kernel, float64(a.KernelSize)/1e6, a.Initramfs, float64(a.InitrdN)/1e6, len(a.Modules), strings.Join(a.Modules, ", "),
		a.ISO, float64(a.ISOSize)/1e6, a.UKI, float64(a.UKISize)/1e6, a.DiskImage, float64(a.DiskImageSize)/1e6, a.Cmdline, strings.Join(metal.DefaultKernelArgs, " "))

	for _, name := range opts.Platforms {
		img := a.PlatformImages[name]
		fmt.Fprintf(stdout, "%s disk image %s: %.1f MB (%s)\n", name, img.Path, float64(img.Size)/1e6, strings.Join(metal.PlatformKernelArgs(name), " "))
	}

	for _, c := range a.Compressed {
		fmt.Fprintf(stdout, "compressed %s: %.1f MB\n", c.Path, float64(c.Size)/1e6)
	}

	return nil
}
