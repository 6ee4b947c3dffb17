// Package metal is the node on its own kernel: the initramfs's /init, which reads the kernel
// arguments, loads the modules the boot needs, configures the network of `ip=` and starts the
// node image's machined on its own root.
package metal

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/talos-go/talos/internal/platform"
)

// Cmdline is the kernel command line: every value of each argument, in order.
type Cmdline map[string][]string

// ParseCmdline splits /proc/cmdline into its arguments (a flag without "=" has value "").
func ParseCmdline(line string) Cmdline {
	c := Cmdline{}

	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		c[k] = append(c[k], v)
	}

	return c
}

// Get is an argument's last value, as the kernel's own parameters take the last one given.
func (c Cmdline) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[len(v)-1]
	}

	return ""
}

// List is every value of an argument that may be repeated, each split at commas
// (talos.network.interface.ignore=eth1 talos.network.interface.ignore=eth2,eth3).
func (c Cmdline) List(key string) []string {
	var out []string

	for _, v := range c[key] {
		for _, s := range strings.Split(v, ",") {
			if s != "" {
				out = append(out, s)
			}
		}
	}

	return out
}

// IPConfig is the kernel's `ip=` argument, in the nfsroot form
// ip=<client>:<server>:<gateway>:<netmask>:<hostname>:<device>:<autoconf>:<dns0>:<dns1>:<ntp0>.
type IPConfig struct {
	Address  netip.Prefix // zero: none (DHCP)
	Gateway  netip.Addr
	Hostname string
	Device   string // empty: the first link that is not loopback
	DNS      []netip.Addr
	NTP      []netip.Addr
}

// ParseIP parses an `ip=` value. The single-word forms (dhcp, on, any, ...) ask for DHCP: a
// zero Address.
func ParseIP(v string) (IPConfig, error) {
	var c IPConfig

	f := strings.Split(v, ":")
	if len(f) == 1 {
		switch v {
		case "", "dhcp", "on", "any", "both":
			return c, nil
		case "off", "none":
			return c, fmt.Errorf("ip=%s: a node needs a network: give ip=dhcp or ip=<address>::<gateway>:<netmask>:<hostname>:<device>:off", v)
		}

		return c, fmt.Errorf("ip=%s: unknown form: give ip=dhcp or ip=<address>::<gateway>:<netmask>:<hostname>:<device>:off", v)
	}

	field := func(i int) string {
		if i < len(f) {
			return f[i]
		}

		return ""
	}

	addr := func(i int, name string) (netip.Addr, error) {
		if field(i) == "" {
			return netip.Addr{}, nil
		}

		a, err := netip.ParseAddr(field(i))
		if err != nil {
			return a, fmt.Errorf("ip=: %s %q is not an IP address", name, field(i))
		}

		return a, nil
	}

	client, err := addr(0, "client address")
	if err != nil {
		return c, err
	}

	if c.Gateway, err = addr(2, "gateway"); err != nil {
		return c, err
	}

	bits := 24
	if client.Is6() {
		bits = 64
	}

	if m := field(3); m != "" {
		mask, err := netip.ParseAddr(m)
		if err != nil {
			return c, fmt.Errorf("ip=: netmask %q is not a mask like 255.255.255.0", m)
		}

		if bits, err = maskBits(mask); err != nil {
			return c, err
		}
	}

	if client.IsValid() {
		c.Address = netip.PrefixFrom(client, bits)
	}

	c.Hostname, c.Device = field(4), field(5)

	for _, x := range []struct {
		i    int
		name string
	}{{7, "dns0"}, {8, "dns1"}, {9, "ntp0"}} {
		a, err := addr(x.i, x.name)
		if err != nil {
			return c, err
		}

		switch {
		case !a.IsValid():
		case x.i == 9:
			c.NTP = append(c.NTP, a)
		default:
			c.DNS = append(c.DNS, a)
		}
	}

	return c, nil
}

// maskBits is the prefix length of a netmask.
func maskBits(mask netip.Addr) (int, error) {
	b := mask.AsSlice()
	bits, done := 0, false

	for _, x := range b {
		for i := 7; i >= 0; i-- {
			set := x&(1<<i) != 0
			if set && done {
				return 0, fmt.Errorf("ip=: netmask %s has a hole: give one like 255.255.255.0", mask)
			}

			if set {
				bits++
			} else {
				done = true
			}
		}
	}

	return bits, nil
}

// KSPPKernelArgs are the kernel arguments the Kernel Self Protection Project recommends and
// upstream requires on metal: memory zeroed on allocation, slab caches never merged, and page
// table isolation on. A boot without them stops.
var KSPPKernelArgs = []string{"init_on_alloc=1", "slab_nomerge", "pti=on"}

// DefaultKernelArgs are the kernel arguments of a metal boot, as `make boot` writes them to
// _out/boot/cmdline: the platform, the KSPP arguments and the serial console.
var DefaultKernelArgs = PlatformKernelArgs(platform.Metal)

// platformConsoleArgs are the arguments each platform's own (upstream's KernelArgs, amd64)
// besides talos.platform=: its consoles (the last one is /dev/console: the serial port the
// cloud shows), and net.ifnames=0 where upstream asks it (Azure's also its early printk and
// root delay).
var platformConsoleArgs = map[string][]string{
	platform.Metal:     {"console=ttyS0"},
	platform.Nocloud:   {"console=tty1", "console=ttyS0"},
	platform.OpenStack: {"console=tty1", "console=ttyS0"},
	platform.AWS:       {"console=tty1", "console=ttyS0", "net.ifnames=0"},
	platform.GCP:       {"console=ttyS0", "net.ifnames=0"},
	platform.Azure:     {"console=ttyS0,115200n8", "earlyprintk=ttyS0,115200", "rootdelay=300", "net.ifnames=0"},
}

// PlatformKernelArgs are the kernel arguments a disk image for the platform boots with:
// talos.platform=, the KSPP arguments, the platform's consoles and printk.devkmsg=on (nil for a
// platform not in platform.Known).
func PlatformKernelArgs(name string) []string {
	consoles, ok := platformConsoleArgs[name]
	if !ok {
		return nil
	}

	args := append([]string{"talos.platform=" + name}, KSPPKernelArgs...)

	return append(append(args, consoles...), "printk.devkmsg=on")
}

// CheckKSPP reports the KSPP arguments the command line lacks (or gives another value).
func (c Cmdline) CheckKSPP() error {
	var missing []string

	for _, arg := range KSPPKernelArgs {
		key, want, hasValue := strings.Cut(arg, "=")

		_, present := c[key]
		if !present || (hasValue && c.Get(key) != want) {
			missing = append(missing, arg)
		}
	}

	if len(missing) > 0 {
		return fmt.Errorf("the kernel command line lacks the KSPP arguments %s: add them (_out/boot/cmdline has the defaults)", strings.Join(missing, " "))
	}

	return nil
}
