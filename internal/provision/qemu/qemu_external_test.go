package qemu_test

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/talos-go/talos/internal/provision"
	"github.com/talos-go/talos/internal/provision/provisiontest"
	"github.com/talos-go/talos/internal/provision/qemu"
)

func TestQEMURequestRefused(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("no qemu-system-x86_64: the refusals below come after that check")
	}

	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img")

	for _, f := range []string{kernel, initrd} {
		if err := os.WriteFile(f, []byte("asset"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	good := func() provision.Request {
		return provision.Request{
			Name: "q", ControlPlanes: 1, CIDR: netip.MustParsePrefix(provision.DefaultContainerCIDR), Binary: "/bin/true",
			Provisioner: provision.ProvisionerQEMU,
			Container:   provision.ContainerRequest{MTU: 1500, CPUs: 2, CPUsWorkers: 2, MemoryMB: 2048, MemoryWorker: 2048},
			QEMU:        provision.QEMURequest{Kernel: kernel, Initrd: initrd, DiskMB: 6144},
		}
	}

	for _, tc := range []struct {
		name   string
		euid   int
		change func(*provision.Request)
		want   []string
	}{
		{"not root", 1000, func(*provision.Request) {}, []string{"needs root", "--provisioner process"}},
		{"loopback network", 0, func(r *provision.Request) { r.CIDR = netip.MustParsePrefix("127.5.0.0/24") }, []string{"--cidr 127.5.0.0/24", "10.5.0.0/24"}},
		{"small disk", 0, func(r *provision.Request) { r.QEMU.DiskMB = 100 }, []string{"--disk 100", "2228 MB"}},
		{"small memory", 0, func(r *provision.Request) { r.Container.MemoryWorker = 512 }, []string{"--memory-workers", "1024"}},
		{"no cpus", 0, func(r *provision.Request) { r.Container.CPUs = 0 }, []string{"--cpus", "positive"}},
		{"no kernel", 0, func(r *provision.Request) { r.QEMU.Kernel = filepath.Join(dir, "missing") }, []string{"--vmlinuz-path", "make boot"}},
		{"unsupported disk driver", 0, func(r *provision.Request) {
			r.QEMU.ExtraDisks, r.QEMU.ExtraDisksSizeMB, r.QEMU.ExtraDisksDrivers = 1, 512, []string{"ide"}
		}, []string{`--extra-disks-drivers "ide"`, "virtio, scsi, nvme"}},
		{"more drivers than disks", 0, func(r *provision.Request) {
			r.QEMU.ExtraDisks, r.QEMU.ExtraDisksSizeMB, r.QEMU.ExtraDisksDrivers = 1, 512, []string{"nvme", "scsi"}
		}, []string{"--extra-disks-drivers names 2 drivers for 1"}},
		{"empty extra disks", 0, func(r *provision.Request) { r.QEMU.ExtraDisks = 2 }, []string{"--extra-disks-size 0"}},
		{"no initramfs", 0, func(r *provision.Request) { r.QEMU.Initrd = filepath.Join(dir, "missing") }, []string{"--initrd-path", "make boot"}},
		{"no ISO", 0, func(r *provision.Request) { r.QEMU.ISO = filepath.Join(dir, "missing.iso") }, []string{"--iso-path", "make boot"}},
		{"ISO with kernel arguments", 0, func(r *provision.Request) { r.QEMU.ISO, r.QEMU.ExtraKernelArgs = kernel, []string{"a=b"} }, []string{"--extra-boot-kernel-args", "drop --iso-path"}},
		{"ISO without the bootloader", 0, func(r *provision.Request) { r.QEMU.ISO, r.QEMU.NoBootloader = kernel, true }, []string{"--with-bootloader=false", "drop --iso-path"}},
		{"no USB stick", 0, func(r *provision.Request) { r.QEMU.USB = filepath.Join(dir, "missing.img") }, []string{"--usb-path", "make boot"}},
		{"USB stick with kernel arguments", 0, func(r *provision.Request) { r.QEMU.USB, r.QEMU.ExtraKernelArgs = kernel, []string{"a=b"} }, []string{"--extra-boot-kernel-args", "drop --usb-path"}},
		{"ISO and USB stick", 0, func(r *provision.Request) { r.QEMU.ISO, r.QEMU.USB = kernel, kernel }, []string{"--iso-path, --usb-path, --uki-path, --ipxe-boot-script and --disk-image-path each give", "give one"}},
		{"disk image and ISO", 0, func(r *provision.Request) { r.QEMU.ISO, r.QEMU.DiskImage = kernel, kernel }, []string{"--disk-image-path each give", "give one"}},
		{"disk image on 4Kn", 0, func(r *provision.Request) { r.QEMU.DiskImage, r.QEMU.DiskBlockSize = kernel, 4096 }, []string{"--disk-image-path", "drop --disk-block-size 4096"}},
		{"no disk image", 0, func(r *provision.Request) { r.QEMU.DiskImage = filepath.Join(dir, "missing.raw") }, []string{"--disk-image-path", "make boot"}},
		{"iPXE script not a URL", 0, func(r *provision.Request) { r.QEMU.IPXEBootScript = "boot.ipxe" }, []string{`--ipxe-boot-script "boot.ipxe"`, "http://"}},
		{"iPXE with UEFI", 0, func(r *provision.Request) { r.QEMU.IPXEBootScript = "http://10.5.0.1/boot.ipxe" }, []string{"--ipxe-boot-script", "add --with-uefi=false"}},
		{"odd block size", 0, func(r *provision.Request) { r.QEMU.DiskBlockSize = 1024 }, []string{"--disk-block-size 1024", "512 or 4096"}},
		{"4Kn with the BIOS", 0, func(r *provision.Request) { r.QEMU.DiskBlockSize, r.QEMU.NoUEFI = 4096, true }, []string{"--disk-block-size 4096", "UEFI only"}},
		{"UKI with the BIOS", 0, func(r *provision.Request) { r.QEMU.UKI, r.QEMU.NoUEFI = kernel, true }, []string{"--uki-path", "drop --with-uefi=false"}},
		{"unknown config injection", 0, func(r *provision.Request) { r.QEMU.ConfigInjection = "floppy" }, []string{"--config-injection-method \"floppy\"", "metal-iso"}},
		{"metal-iso and an ISO", 0, func(r *provision.Request) { r.QEMU.ConfigInjection, r.QEMU.ISO = "metal-iso", kernel }, []string{"--config-injection-method metal-iso", "--iso-path", "drop one"}},
		{"metal-iso and apply-config", 0, func(r *provision.Request) { r.QEMU.ConfigInjection, r.QEMU.ApplyConfig = "metal-iso", true }, []string{"--with-apply-config", "drop one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := good()
			tc.change(&req)
			provisiontest.AssertRefused(t, qemu.Geteuid, req, tc.euid, tc.want...)
		})
	}
}
