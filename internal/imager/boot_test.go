package imager

import (
	"bytes"
	"debug/pe"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/udev"
)

// fakeKernel lays out an extracted linux-image package: a kernel and three modules, of which
// the initramfs takes virtio_net with its dependency and leaves the sound driver.
func fakeKernel(t *testing.T) string {
	t.Helper()

	root := t.TempDir()

	files := map[string]string{
		"boot/vmlinuz-6.1.0-9-cloud-amd64": "kernel",
		"lib/modules/6.1.0-9-cloud-amd64/modules.dep": "kernel/drivers/net/virtio_net.ko: kernel/net/core/failover.ko\n" +
			"kernel/net/core/failover.ko:\nkernel/sound/snd.ko:\n",
		"lib/modules/6.1.0-9-cloud-amd64/modules.alias":                    "alias virtio:d00000001v* virtio_net\nalias snd-card-* snd\n",
		"lib/modules/6.1.0-9-cloud-amd64/modules.builtin":                  "kernel/fs/ext4/ext4.ko\n",
		"lib/modules/6.1.0-9-cloud-amd64/kernel/drivers/net/virtio_net.ko": "virtio_net",
		"lib/modules/6.1.0-9-cloud-amd64/kernel/net/core/failover.ko":      "failover",
		"lib/modules/6.1.0-9-cloud-amd64/kernel/sound/snd.ko":              "snd",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	return root
}

// cpioMember is one member of a newc archive.
type cpioMember struct {
	name         string
	mode         uint32
	data         []byte
	major, minor uint32 // a device's
}

// readCpio reads a newc archive's members, up to its trailer.
func readCpio(t *testing.T, b []byte) []cpioMember {
	t.Helper()

	hex := func(s []byte) uint32 {
		n, err := strconv.ParseUint(string(s), 16, 32)
		if err != nil {
			t.Fatalf("bad header field %q", s)
		}

		return uint32(n)
	}
	align := func(n int) int { return (n + 3) &^ 3 }

	var out []cpioMember

	for off := 0; ; {
		h := b[off:]
		if string(h[:6]) != "070701" {
			t.Fatalf("no newc magic at %d", off)
		}

		size, nameLen := int(hex(h[54:62])), int(hex(h[94:102]))
		name := string(h[110 : 110+nameLen-1])
		data := align(off+110+nameLen) - off

		if name == "TRAILER!!!" {
			return out
		}

		out = append(out, cpioMember{name: name, mode: hex(h[14:22]), data: h[data : data+size], major: hex(h[78:86]), minor: hex(h[86:94])})
		off = align(off + data + size)
	}
}

// cpioEntries reads a newc archive's names and contents.
func cpioEntries(t *testing.T, b []byte) map[string]string {
	t.Helper()

	out := map[string]string{}
	for _, e := range readCpio(t, b) {
		out[e.name] = string(e.data)
	}

	return out
}

// unpackCpio unpacks a newc archive under dir as the kernel does: folders, files and character
// devices with their modes.
func unpackCpio(t *testing.T, b []byte, dir string) {
	t.Helper()

	for _, e := range readCpio(t, b) {
		p := filepath.Join(dir, e.name)
		perm := e.mode & 0o777

		var err error

		switch e.mode & 0o170000 {
		case cpioDir:
			err = os.Mkdir(p, os.FileMode(perm))
		case cpioFile:
			err = os.WriteFile(p, e.data, os.FileMode(perm))
		case cpioChr:
			err = unix.Mknod(p, unix.S_IFCHR|perm, int(unix.Mkdev(e.major, e.minor)))
		}

		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildBootReproducible(t *testing.T) {
	if _, err := os.Stat(filepath.Join(DefaultGRUBDir, "boot.img")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("Debian's grub-pc-bin is missing: .ci/run must install it")
		}

		t.Skip("no grub-pc-bin")
	}

	kernel := fakeKernel(t)
	dir := t.TempDir()

	// A node image holding only its machined, which becomes /init.
	needTool(t, "mksquashfs", "squashfs-tools")

	image := filepath.Join(dir, "image")
	if err := os.MkdirAll(filepath.Join(image, filepath.Dir(InitPath)), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(image, InitPath), []byte("init binary"), 0o755); err != nil {
		t.Fatal(err)
	}

	rootfs := filepath.Join(dir, "rootfs.sqsh")
	if out, err := exec.Command("mksquashfs", image, rootfs, "-noappend", "-quiet").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v: %s", err, out)
	}

	rootfsBytes, err := os.ReadFile(rootfs)
	if err != nil {
		t.Fatal(err)
	}

	var images, isos [2][]byte

	for i := range images {
		out := filepath.Join(t.TempDir(), "boot")

		a, err := BuildBoot(BootOptions{KernelRoot: kernel, Rootfs: rootfs, Out: out})
		if err != nil {
			t.Fatal(err)
		}

		if a.Release != "6.1.0-9-cloud-amd64" || !slices.Equal(a.Modules, []string{"virtio_net"}) {
			t.Fatalf("release %q, modules %v", a.Release, a.Modules)
		}

		if images[i], err = os.ReadFile(a.Initramfs); err != nil {
			t.Fatal(err)
		}

		if isos[i], err = os.ReadFile(a.ISO); err != nil {
			t.Fatal(err)
		}

		if i == 0 {
			checkDiskImage(t, a)
		}

		// The unified kernel image carries the same kernel and initramfs.
		uki, err := pe.Open(a.UKI)
		if err != nil {
			t.Fatal(err)
		}

		for _, s := range []struct{ name, file string }{{".linux", a.Kernel}, {".initrd", a.Initramfs}} {
			want, _ := os.ReadFile(s.file)
			if sec := uki.Section(s.name); sec == nil {
				t.Errorf("the UKI has no %s", s.name)
			} else if data, _ := sec.Data(); !bytes.HasPrefix(data, want) {
				t.Errorf("the UKI's %s is not %s", s.name, s.file)
			}
		}

		uki.Close()
	}

	if !bytes.Equal(images[0], images[1]) {
		t.Fatal("two builds of the same inputs differ")
	}

	// A node booted from it writes the same bytes back from the files the kernel unpacked,
	// leaving out what its boot added (so an installed UKI measures as the built one).
	if os.Getuid() == 0 {
		root := t.TempDir()
		unpackCpio(t, images[0], root)

		if err := os.WriteFile(filepath.Join(root, "config.yaml"), []byte("secrets"), 0o600); err != nil {
			t.Fatal(err)
		}

		if err := os.MkdirAll(filepath.Join(root, ".extra"), 0o755); err != nil {
			t.Fatal(err)
		}

		var again bytes.Buffer
		if err := WriteInitramfs(&again, root, metal.InitramfsAdded...); err != nil {
			t.Fatal(err)
		}

		if !bytes.Equal(again.Bytes(), images[0]) {
			t.Error("the initramfs written back from its unpacked files differs from the built one")
		}
	}

	// The ISO: El Torito boot with GRUB, its menu booting the kernel and initramfs with the
	// default kernel arguments; the same bytes from the same inputs.
	if !bytes.Equal(isos[0], isos[1]) {
		t.Error("two ISOs of the same inputs differ")
	}

	// BIOS and UEFI: GRUB's UEFI program is in the FAT image the ISO boots UEFI from.
	for _, want := range []string{"CD001", "EL TORITO SPECIFICATION", "linux /boot/vmlinuz talos.platform=metal", "initrd /boot/initramfs.img", "BOOTX64 EFI"} {
		if !bytes.Contains(isos[0], []byte(want)) {
			t.Errorf("the ISO holds no %q", want)
		}
	}

	e := cpioEntries(t, images[0])
	mods := "lib/modules/6.1.0-9-cloud-amd64/"

	for name, want := range map[string]string{
		"init": "init binary", "rootfs.sqsh": string(rootfsBytes), "dev/console": "",
		mods + "kernel/drivers/net/virtio_net.ko": "virtio_net", mods + "kernel/net/core/failover.ko": "failover",
		mods + "modules.alias": "alias virtio:d00000001v* virtio_net\n",
	} {
		if got, ok := e[name]; !ok || got != want {
			t.Errorf("%s: %q (present %v), want %q", name, got, ok, want)
		}
	}

	bootImg, err := os.ReadFile(filepath.Join(DefaultGRUBDir, "boot.img"))
	if err != nil {
		t.Fatal(err)
	}

	if e["boot/grub/boot.img"] != string(bootImg) {
		t.Error("the initramfs does not carry GRUB's boot.img")
	}

	// core.img starts with GRUB's diskboot.img, the sector that loads the rest.
	diskboot, err := os.ReadFile(filepath.Join(DefaultGRUBDir, "diskboot.img"))
	if err != nil {
		t.Fatal(err)
	}

	if core := e["boot/grub/core.img"]; len(core) < 4096 || core[:400] != string(diskboot[:400]) {
		t.Errorf("boot/grub/core.img: %d bytes, not a GRUB core image", len(core))
	}

	// The installed disk's UEFI boot: a PE program (GRUB for x86_64-efi).
	if efi := e["boot/grub/"+metal.GRUBEFIName]; len(efi) < 4096 || efi[:2] != "MZ" {
		t.Errorf("boot/grub/%s: %d bytes, not a UEFI program", metal.GRUBEFIName, len(efi))
	}

	kernelBytes, err := os.ReadFile(filepath.Join(kernel, "boot", "vmlinuz-6.1.0-9-cloud-amd64"))
	if err != nil {
		t.Fatal(err)
	}

	if e["boot/vmlinuz"] != string(kernelBytes) {
		t.Error("the initramfs does not carry the kernel")
	}

	if _, ok := e[mods+"kernel/sound/snd.ko"]; ok {
		t.Error("the initramfs carries a module the boot does not need")
	}
}

func TestBuildBootNeedsOneKernel(t *testing.T) {
	_, err := BuildBoot(BootOptions{KernelRoot: t.TempDir(), Out: t.TempDir()})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("make boot")) {
		t.Fatalf("no kernel: %v", err)
	}
}

// A node writes its initramfs again from the files the kernel unpacked: the archive holds the
// same entries with the same contents.
func TestWriteInitramfsFromUnpackedFiles(t *testing.T) {
	root := t.TempDir()

	files := map[string]string{"init": "init binary", "rootfs.sqsh": "squashfs", "lib/modules/6.1/kernel/x.ko": "module", "boot/vmlinuz": "kernel"}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}

	if os.Getuid() == 0 {
		if err := unix.Mknod(filepath.Join(root, "dev/console"), unix.S_IFCHR|0o600, int(unix.Mkdev(5, 1))); err != nil {
			t.Fatal(err)
		}
	}

	var b bytes.Buffer
	if err := WriteInitramfs(&b, root); err != nil {
		t.Fatal(err)
	}

	got := cpioEntries(t, b.Bytes())
	for name, content := range files {
		if got[name] != content {
			t.Errorf("%s: %q, want %q", name, got[name], content)
		}
	}

	for _, dir := range []string{"lib", "lib/modules", "lib/modules/6.1", "lib/modules/6.1/kernel", "boot", "dev"} {
		if _, ok := got[dir]; !ok {
			t.Errorf("folder %s is missing", dir)
		}
	}

	if os.Getuid() == 0 {
		if _, ok := got["dev/console"]; !ok {
			t.Error("dev/console is missing")
		}
	}

	if err := os.Symlink("init", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}

	if err := WriteInitramfs(io.Discard, root); err == nil || !strings.Contains(err.Error(), "link") {
		t.Errorf("a symlink: %v, want a refusal naming it", err)
	}
}

// checkDiskImage reads the disk image back: upstream's partitions, GRUB's boot sector, XFS on
// BOOT (slot A's kernel and initramfs, GRUB's menu), STATE (empty: no config) and EPHEMERAL,
// FAT with GRUB for UEFI on EFI.
func checkDiskImage(t *testing.T, a BootAssets) {
	t.Helper()

	f, err := os.Open(a.DiskImage)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	parts, err := partition.Read(f)
	if err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}

	if !slices.Equal(names, []string{"EFI", "BIOS", "BOOT", "META", "STATE", "EPHEMERAL"}) || a.DiskImageSize != partition.MinSize(partition.Layout) {
		t.Fatalf("disk image: partitions %v, %d bytes", names, a.DiskImageSize)
	}

	mbr := make([]byte, 512)
	if _, err = f.ReadAt(mbr, 0); err != nil || mbr[510] != 0x55 || mbr[511] != 0xaa || bytes.Count(mbr[:0x1b8], []byte{0}) == 0x1b8 {
		t.Error("disk image: no GRUB boot sector")
	}

	dir := t.TempDir()

	for _, p := range parts {
		want := map[string]string{"EFI": "vfat", "BOOT": "xfs", "STATE": "xfs", "EPHEMERAL": "xfs"}[p.Name]
		if want == "" {
			continue
		}

		// Each filesystem, cut out of the image, as a tool reads it.
		part := filepath.Join(dir, p.Name)

		out, err := os.Create(part)
		if err != nil {
			t.Fatal(err)
		}

		if _, err = io.Copy(out, io.NewSectionReader(f, p.Offset(), p.Bytes())); err != nil {
			t.Fatal(err)
		}

		out.Close()

		v, err := udev.Probe(part)
		if err != nil || v.Filesystem != want || v.Label != p.Name {
			t.Errorf("disk image partition %s: %s %q, want %s labelled so (%v)", p.Name, v.Filesystem, v.Label, want, err)
		}

		var listing []byte

		switch p.Name {
		case "BOOT":
			listing, _ = exec.Command("xfs_db", "-r", "-c", "ls /A", "-c", "ls /grub", part).CombinedOutput()
			for _, w := range []string{"vmlinuz", "initramfs.img", "grub.cfg"} {
				if !bytes.Contains(listing, []byte(w)) {
					t.Errorf("BOOT has no %s:\n%s", w, listing)
				}
			}
		case "EFI":
			listing, _ = exec.Command("mdir", "-i", part, "::/EFI/BOOT").CombinedOutput()
			if !bytes.Contains(listing, []byte("BOOTX64")) {
				t.Errorf("EFI has no GRUB for UEFI:\n%s", listing)
			}
		}
	}
}

// The initramfs built from Debian's cloud kernel (make boot's, in _out/cache/kernel) carries the
// clouds' own drivers with what they depend on: Hyper-V's bus, disk and network for Azure, ENA
// for AWS and gVNIC for GCP, which QEMU cannot show.
func TestCloudDriversFromTheRealKernel(t *testing.T) {
	deps, _ := filepath.Glob("../../_out/cache/kernel/*/lib/modules/*/modules.dep")
	if len(deps) == 0 {
		t.Skip("no kernel package in _out/cache/kernel: run make boot")
	}

	d, err := readModulesDep(deps[0])
	if err != nil {
		t.Fatal(err)
	}

	files, modules := bootModuleFiles(d)
	for _, m := range []string{"hv_vmbus", "hv_storvsc", "hv_netvsc", "hv_utils", "ena", "gve"} {
		if !slices.Contains(modules, m) {
			t.Errorf("the initramfs does not carry %s (modules: %v)", m, modules)
			continue
		}

		for _, dep := range d.deps[m] {
			if !slices.Contains(files, dep) {
				t.Errorf("%s's dependency %s is not carried", m, dep)
			}
		}
	}
}
