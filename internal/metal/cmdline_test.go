package metal

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/platform"
)

func TestParseCmdline(t *testing.T) {
	c := ParseCmdline("console=ttyS0 talos.platform=metal quiet ip=dhcp ip=10.0.0.2::10.0.0.1:255.255.255.0::eth0:off " +
		"talos.network.interface.ignore=eth1 talos.network.interface.ignore=eth2,eth3\n")

	if c.Get("talos.platform") != "metal" || c.Get("console") != "ttyS0" || c.Get("nosuch") != "" {
		t.Fatalf("got %v", c)
	}

	if v, ok := c["quiet"]; !ok || c.Get("quiet") != "" {
		t.Fatalf("a flag: %q %v", v, ok)
	}

	if c.Get("ip") != "10.0.0.2::10.0.0.1:255.255.255.0::eth0:off" {
		t.Fatalf("the last ip= wins, as the kernel's: %q", c.Get("ip"))
	}

	if got := c.List("talos.network.interface.ignore"); !slices.Equal(got, []string{"eth1", "eth2", "eth3"}) {
		t.Fatalf("ignored interfaces: %v", got)
	}
}

func TestParseIP(t *testing.T) {
	c, err := ParseIP("10.0.2.15:10.0.2.2:10.0.2.1:255.255.240.0:node-1:eth1:off:1.1.1.1:8.8.8.8:10.0.0.9")
	if err != nil {
		t.Fatal(err)
	}

	want := IPConfig{
		Address: netip.MustParsePrefix("10.0.2.15/20"), Gateway: netip.MustParseAddr("10.0.2.1"), Hostname: "node-1", Device: "eth1",
		DNS: []netip.Addr{netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("8.8.8.8")}, NTP: []netip.Addr{netip.MustParseAddr("10.0.0.9")},
	}
	if c.Address != want.Address || c.Gateway != want.Gateway || c.Hostname != want.Hostname || c.Device != want.Device ||
		!slices.Equal(c.DNS, want.DNS) || !slices.Equal(c.NTP, want.NTP) {
		t.Fatalf("got %+v, want %+v", c, want)
	}

	// Without a netmask, a /24; a short form with just the address.
	if c, err = ParseIP("192.168.1.5:::::"); err != nil || c.Address != netip.MustParsePrefix("192.168.1.5/24") || c.Device != "" {
		t.Fatalf("short form: %+v %v", c, err)
	}

	for _, dhcp := range []string{"", "dhcp", "on", "any"} {
		if c, err = ParseIP(dhcp); err != nil || c.Address.IsValid() {
			t.Fatalf("ip=%s: want DHCP, got %+v %v", dhcp, c, err)
		}
	}

	for v, msg := range map[string]string{
		"off":                                "a node needs a network",
		"bogus":                              "unknown form",
		"10.0.2.999::10.0.2.2:255.255.255.0": `client address "10.0.2.999"`,
		"10.0.2.15::gw:255.255.255.0":        `gateway "gw"`,
		"10.0.2.15::10.0.2.2:255.0.255.0":    "netmask 255.0.255.0 has a hole",
		"10.0.2.15::10.0.2.2:mask":           `netmask "mask"`,
		"10.0.2.15::10.0.2.2:255.255.255.0:::off:dns": `dns0 "dns"`,
	} {
		if _, err = ParseIP(v); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ip=%s: want an error with %q, got %v", v, msg, err)
		}
	}
}

func TestModulesIndex(t *testing.T) {
	dir := t.TempDir()

	for name, content := range map[string]string{
		"modules.dep": "kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n" +
			"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\nkernel/net/core/failover.ko:\n" +
			"kernel/fs/fuse/cuse-x.ko:\n",
		"modules.alias":   "alias virtio:d00000001v* virtio_net\nalias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\nalias fs-cuse cuse_x\n",
		"modules.builtin": "kernel/fs/ext4/ext4.ko\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	m, err := OpenModules(dir)
	if err != nil {
		t.Fatal(err)
	}

	if got := m.ForAlias("virtio:d00000001v00001AF4"); !slices.Equal(got, []string{"virtio_net"}) {
		t.Fatalf("virtio net device: %v", got)
	}

	if got := m.ForAlias("pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00"); len(got) != 0 {
		t.Fatalf("an Intel bridge matched %v", got)
	}

	if m.paths["cuse_x"] != "kernel/fs/fuse/cuse-x.ko" || moduleName("a/b/snd-hda.ko.xz") != "snd_hda" {
		t.Fatalf("module names use underscores: %v", m.paths)
	}

	// Built in: nothing to load, no error; unknown: an error naming it.
	if err = m.Load("ext4"); err != nil {
		t.Fatalf("a built-in module: %v", err)
	}

	if err = m.Load("nosuch"); err == nil || !strings.Contains(err.Error(), "module nosuch") {
		t.Fatalf("an unknown module: %v", err)
	}
}

func TestCheckKSPP(t *testing.T) {
	if err := ParseCmdline(strings.Join(DefaultKernelArgs, " ")).CheckKSPP(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}

	err := ParseCmdline("talos.platform=metal init_on_alloc=1 init_on_alloc=0 pti=on").CheckKSPP()
	if err == nil || !strings.Contains(err.Error(), "KSPP arguments init_on_alloc=1 slab_nomerge:") {
		t.Fatalf("got %v, want init_on_alloc=1 (the last value counts) and slab_nomerge named", err)
	}
}

func TestPlatformKernelArgs(t *testing.T) {
	if got, want := strings.Join(DefaultKernelArgs, " "), "talos.platform=metal init_on_alloc=1 slab_nomerge pti=on console=ttyS0 printk.devkmsg=on"; got != want {
		t.Fatalf("metal's defaults changed: %q, want %q", got, want)
	}

	for _, name := range platform.Known {
		args := PlatformKernelArgs(name)
		c := ParseCmdline(strings.Join(args, " "))

		if c.Get("talos.platform") != name || c.CheckKSPP() != nil {
			t.Errorf("%s: %v: want talos.platform=%s and the KSPP arguments", name, args, name)
		}

		// The last console is /dev/console: the serial port every platform shows.
		if consoles := c["console"]; len(consoles) == 0 || !strings.HasPrefix(consoles[len(consoles)-1], "ttyS0") {
			t.Errorf("%s: consoles %v: the last is not ttyS0", name, consoles)
		}
	}

	if got := strings.Join(PlatformKernelArgs("azure"), " "); !strings.Contains(got, "console=ttyS0,115200n8 earlyprintk=ttyS0,115200 rootdelay=300 net.ifnames=0") {
		t.Errorf("azure: %q lacks upstream's serial console, early printk, root delay and net.ifnames=0", got)
	}

	if got := PlatformKernelArgs("vmware"); got != nil {
		t.Errorf("a platform not known: %v, want nil", got)
	}
}
