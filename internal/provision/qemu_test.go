package provision

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/talos-go/talos/internal/udev"
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

	good := func() Request {
		return Request{
			Name: "q", ControlPlanes: 1, CIDR: netip.MustParsePrefix(DefaultContainerCIDR), Binary: "/bin/true",
			Provisioner: ProvisionerQEMU,
			Container:   ContainerRequest{MTU: 1500, CPUs: 2, CPUsWorkers: 2, MemoryMB: 2048, MemoryWorker: 2048},
			QEMU:        QEMURequest{Kernel: kernel, Initrd: initrd, DiskMB: 6144},
		}
	}

	for _, tc := range []struct {
		name   string
		euid   int
		change func(*Request)
		want   []string
	}{
		{"not root", 1000, func(*Request) {}, []string{"needs root", "--provisioner process"}},
		{"loopback network", 0, func(r *Request) { r.CIDR = netip.MustParsePrefix("127.5.0.0/24") }, []string{"--cidr 127.5.0.0/24", "10.5.0.0/24"}},
		{"small disk", 0, func(r *Request) { r.QEMU.DiskMB = 100 }, []string{"--disk 100", "2228 MB"}},
		{"small memory", 0, func(r *Request) { r.Container.MemoryWorker = 512 }, []string{"--memory-workers", "1024"}},
		{"no cpus", 0, func(r *Request) { r.Container.CPUs = 0 }, []string{"--cpus", "positive"}},
		{"no kernel", 0, func(r *Request) { r.QEMU.Kernel = filepath.Join(dir, "missing") }, []string{"--vmlinuz-path", "make boot"}},
		{"unsupported disk driver", 0, func(r *Request) {
			r.QEMU.ExtraDisks, r.QEMU.ExtraDisksSizeMB, r.QEMU.ExtraDisksDrivers = 1, 512, []string{"ide"}
		}, []string{`--extra-disks-drivers "ide"`, "virtio, scsi, nvme"}},
		{"more drivers than disks", 0, func(r *Request) {
			r.QEMU.ExtraDisks, r.QEMU.ExtraDisksSizeMB, r.QEMU.ExtraDisksDrivers = 1, 512, []string{"nvme", "scsi"}
		}, []string{"--extra-disks-drivers names 2 drivers for 1"}},
		{"empty extra disks", 0, func(r *Request) { r.QEMU.ExtraDisks = 2 }, []string{"--extra-disks-size 0"}},
		{"no initramfs", 0, func(r *Request) { r.QEMU.Initrd = filepath.Join(dir, "missing") }, []string{"--initrd-path", "make boot"}},
		{"no ISO", 0, func(r *Request) { r.QEMU.ISO = filepath.Join(dir, "missing.iso") }, []string{"--iso-path", "make boot"}},
		{"ISO with kernel arguments", 0, func(r *Request) { r.QEMU.ISO, r.QEMU.ExtraKernelArgs = kernel, []string{"a=b"} }, []string{"--extra-boot-kernel-args", "drop --iso-path"}},
		{"ISO without the bootloader", 0, func(r *Request) { r.QEMU.ISO, r.QEMU.NoBootloader = kernel, true }, []string{"--with-bootloader=false", "drop --iso-path"}},
		{"no USB stick", 0, func(r *Request) { r.QEMU.USB = filepath.Join(dir, "missing.img") }, []string{"--usb-path", "make boot"}},
		{"USB stick with kernel arguments", 0, func(r *Request) { r.QEMU.USB, r.QEMU.ExtraKernelArgs = kernel, []string{"a=b"} }, []string{"--extra-boot-kernel-args", "drop --usb-path"}},
		{"ISO and USB stick", 0, func(r *Request) { r.QEMU.ISO, r.QEMU.USB = kernel, kernel }, []string{"--iso-path, --usb-path, --uki-path, --ipxe-boot-script and --disk-image-path each give", "give one"}},
		{"disk image and ISO", 0, func(r *Request) { r.QEMU.ISO, r.QEMU.DiskImage = kernel, kernel }, []string{"--disk-image-path each give", "give one"}},
		{"disk image on 4Kn", 0, func(r *Request) { r.QEMU.DiskImage, r.QEMU.DiskBlockSize = kernel, 4096 }, []string{"--disk-image-path", "drop --disk-block-size 4096"}},
		{"no disk image", 0, func(r *Request) { r.QEMU.DiskImage = filepath.Join(dir, "missing.raw") }, []string{"--disk-image-path", "make boot"}},
		{"iPXE script not a URL", 0, func(r *Request) { r.QEMU.IPXEBootScript = "boot.ipxe" }, []string{`--ipxe-boot-script "boot.ipxe"`, "http://"}},
		{"iPXE with UEFI", 0, func(r *Request) { r.QEMU.IPXEBootScript = "http://10.5.0.1/boot.ipxe" }, []string{"--ipxe-boot-script", "add --with-uefi=false"}},
		{"odd block size", 0, func(r *Request) { r.QEMU.DiskBlockSize = 1024 }, []string{"--disk-block-size 1024", "512 or 4096"}},
		{"4Kn with the BIOS", 0, func(r *Request) { r.QEMU.DiskBlockSize, r.QEMU.NoUEFI = 4096, true }, []string{"--disk-block-size 4096", "UEFI only"}},
		{"UKI with the BIOS", 0, func(r *Request) { r.QEMU.UKI, r.QEMU.NoUEFI = kernel, true }, []string{"--uki-path", "drop --with-uefi=false"}},
		{"unknown config injection", 0, func(r *Request) { r.QEMU.ConfigInjection = "floppy" }, []string{"--config-injection-method \"floppy\"", "metal-iso"}},
		{"metal-iso and an ISO", 0, func(r *Request) { r.QEMU.ConfigInjection, r.QEMU.ISO = "metal-iso", kernel }, []string{"--config-injection-method metal-iso", "--iso-path", "drop one"}},
		{"metal-iso and apply-config", 0, func(r *Request) { r.QEMU.ConfigInjection, r.QEMU.ApplyConfig = "metal-iso", true }, []string{"--with-apply-config", "drop one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := good()
			tc.change(&req)
			assertRefused(t, req, tc.euid, tc.want...)
		})
	}
}

func TestMACsDifferPerNode(t *testing.T) {
	a, b := macFor(netip.MustParseAddr("10.5.0.2")), macFor(netip.MustParseAddr("10.5.0.3"))
	if a != "52:54:00:05:00:02" || a == b {
		t.Fatalf("MACs %s %s", a, b)
	}
}

// The talosconfig's endpoints: every control plane, the one --endpoint names, or the first
// with --init-node-as-endpoint.
func TestTalosEndpoints(t *testing.T) {
	cps := []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("10.5.0.3")}

	for _, c := range []struct {
		req  Request
		want []string
	}{
		{Request{}, []string{"10.5.0.2", "10.5.0.3"}},
		{Request{Endpoint: "lb.example.org"}, []string{"lb.example.org"}},
		{Request{InitNodeAsEndpoint: true}, []string{"10.5.0.2"}},
	} {
		if got := c.req.talosEndpoints(cps); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.req, got, c.want)
		}
	}
}

// The metal-iso image: ISO 9660 labelled metal-iso, the config as config.yaml.
func TestMakeConfigISO(t *testing.T) {
	if _, err := exec.LookPath("xorriso"); err != nil {
		t.Skip("no xorriso")
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "node.yaml")

	if err := os.WriteFile(config, []byte("version: v1alpha1 # the node's\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "config.iso")
	if err := makeConfigISO(config, out); err != nil {
		t.Fatal(err)
	}

	v, err := udev.Probe(out)
	if err != nil || v.Filesystem != "iso9660" || v.Label != "metal-iso" {
		t.Fatalf("probed %+v, %v", v, err)
	}

	b, _ := os.ReadFile(out)
	if !bytes.Contains(b, []byte("CONFIG.YAML")) && !bytes.Contains(b, []byte("config.yaml")) || !bytes.Contains(b, []byte("version: v1alpha1 # the node's")) {
		t.Error("the ISO does not hold the config as config.yaml")
	}
}

// --ipv6's network, as upstream derives it from --cidr.
func TestCIDR6(t *testing.T) {
	if got := CIDR6(netip.MustParsePrefix("10.5.0.0/24")); got != netip.MustParsePrefix("fd74:616c:a05::/64") {
		t.Fatal(got)
	}
}
