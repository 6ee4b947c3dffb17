package metal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/netlink"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/aws"
	"github.com/talos-go/talos/internal/platform/azure"
	"github.com/talos-go/talos/internal/platform/gcp"
	"github.com/talos-go/talos/internal/platform/nocloud"
	"github.com/talos-go/talos/internal/platform/openstack"
	"github.com/talos-go/talos/internal/udev"
)

// platforms are the platforms with a source of their own, by talos.platform= value; metal's is
// the boot's (talos.config=, ip=).
var platforms = map[string]platform.Platform{platform.Nocloud: nocloud.Nocloud{}, platform.OpenStack: openstack.OpenStack{}, platform.Azure: azure.Azure{}, platform.AWS: aws.AWS{}, platform.GCP: gcp.GCP{}}

// volumeDir is where a platform's volume (nocloud's cidata) is mounted while it is read; in
// InitramfsAdded.
const volumeDir = "/platform-volume"

// bootNetwork is the boot's own network, brought up once: ip='s, else DHCP on every link not
// ignored (the first lease is the node's address).
type bootNetwork struct {
	ip     IPConfig
	ignore []string
	up     bool
	leased []string // the links DHCP leased addresses on
}

// Up brings the network up, once.
func (b *bootNetwork) Up() error {
	if b.up {
		return nil
	}

	if b.ip.Address.IsValid() {
		if err := configureNetwork(b.ip); err != nil {
			return err
		}

		b.up = true

		return nil
	}

	if err := loUp(); err != nil {
		return err
	}

	leases, err := dhcpAll(context.Background(), b.ignore)
	if err != nil {
		return err
	}

	l := leases[0]
	b.ip = IPConfig{Address: l.Address, Gateway: l.Gateway, Hostname: l.Hostname, Device: l.Link, DNS: l.DNS}

	for _, l := range leases {
		b.leased = append(b.leased, l.Link)
	}

	b.up = true

	return nil
}

// platformEnv is what a platform may use of this boot.
func platformEnv(cmdline Cmdline, mods *Modules, net *bootNetwork) platform.Env {
	serial, _ := os.ReadFile("/sys/class/dmi/id/product_serial")

	return platform.Env{
		Cmdline:   cmdline.Get,
		Serial:    strings.TrimSpace(string(serial)),
		Volume:    func(labels ...string) (string, string, func(), error) { return mountVolume(mods, labels) },
		Disc:      func(file string) (string, string, func(), error) { return mountDisc(mods, file) },
		NetworkUp: net.Up,
		Get: func(ctx context.Context, url string) ([]byte, error) {
			return download(ctx, "talos.platform", url, true)
		},
		Do: func(ctx context.Context, r platform.Request) ([]byte, error) {
			return request(ctx, "talos.platform", r, true)
		},
		Log: log,
	}
}

// mountVolume mounts read-only the ISO 9660 or FAT filesystem labelled one of labels. A CD-ROM
// behind an IDE or SATA controller (Proxmox's cloud-init drive) shows up a little after its
// controller's driver loads: the devices are looked at again, with their drivers, for a few
// seconds.
func mountVolume(mods *Modules, labels []string) (string, string, func(), error) {
	for try := 0; ; try++ {
		dev, fs, err := findVolume(labels)
		if err != nil {
			return "", "", nil, err
		}

		if dev != "" {
			return mountRO(mods, dev, fs)
		}

		if try == 4 {
			return "", "", nil, fmt.Errorf("%s: %w", strings.Join(labels, " or "), platform.ErrNoVolume)
		}

		if _, err = mods.LoadForDevices("/sys"); err != nil {
			return "", "", nil, err
		}

		time.Sleep(time.Second)
	}
}

// discDrive matches the kernel's names of CD-ROM drives (SCSI, IDE's secondary channel), as
// upstream's Azure platform looks for its provisioning disc.
var discDrive = regexp.MustCompile(`^(sr[0-9]+|hd[c-z])$`)

// mountDisc mounts read-only, one after another, the discs in the CD-ROM drives, as UDF (Azure's
// provisioning disc) else ISO 9660, and returns the first with file at its root; its device is
// named with the filesystem it was read as, for messages. The drives are
// looked at again for a few seconds, as mountVolume's.
func mountDisc(mods *Modules, file string) (string, string, func(), error) {
	for _, m := range []string{"udf", "isofs"} {
		if err := mods.Load(m); err != nil {
			return "", "", nil, err
		}
	}

	if err := os.MkdirAll(volumeDir, 0o700); err != nil {
		return "", "", nil, err
	}

	for try := 0; ; try++ {
		devs, err := partition.Devices("/sys")
		if err != nil {
			return "", "", nil, err
		}

		for _, d := range devs {
			if !discDrive.MatchString(d.Name) {
				continue
			}

			dev := filepath.Join("/dev", d.Name)

			for _, fs := range []string{"udf", "iso9660"} {
				if unix.Mount(dev, volumeDir, fs, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "") != nil {
					continue // not this filesystem, or no disc in the drive
				}

				if _, err = os.Stat(filepath.Join(volumeDir, file)); err == nil {
					return volumeDir, dev + " (" + fs + ")", func() { unix.Unmount(volumeDir, 0) }, nil //nolint:errcheck // read-only: nothing to lose
				}

				unix.Unmount(volumeDir, 0) //nolint:errcheck // read-only: nothing to lose

				break
			}
		}

		if try == 4 {
			return "", "", nil, fmt.Errorf("a disc with %s: %w", file, platform.ErrNoVolume)
		}

		if _, err = mods.LoadForDevices("/sys"); err != nil {
			return "", "", nil, err
		}

		time.Sleep(time.Second)
	}
}

// findVolume is the first block device holding an ISO 9660 or FAT filesystem with one of the
// labels, and its filesystem ("" when there is none).
func findVolume(labels []string) (string, string, error) {
	devs, err := partition.Devices("/sys")
	if err != nil {
		return "", "", err
	}

	for _, d := range devs {
		dev := filepath.Join("/dev", d.Name)

		v, err := udev.Probe(dev)
		if err == nil && (v.Filesystem == "iso9660" || v.Filesystem == "vfat") && slices.Contains(labels, v.Label) {
			return dev, v.Filesystem, nil
		}
	}

	return "", "", nil
}

func mountRO(mods *Modules, dev, fs string) (string, string, func(), error) {
	modules := map[string][]string{"iso9660": {"isofs"}, "vfat": {"vfat", "nls_cp437", "nls_ascii"}}[fs] // FAT's default code page and character set
	for _, m := range modules {
		if err := mods.Load(m); err != nil {
			return "", "", nil, err
		}
	}

	if err := os.MkdirAll(volumeDir, 0o700); err != nil {
		return "", "", nil, err
	}

	if err := unix.Mount(dev, volumeDir, fs, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", "", nil, fmt.Errorf("mounting %s (%s): %w", dev, fs, err)
	}

	return volumeDir, dev, func() { unix.Unmount(volumeDir, 0) }, nil //nolint:errcheck // read-only: nothing to lose
}

// applyPlatformNetwork sets a platform's network on the links, over the boot's own: a network
// without links is the boot's own (ip=, else DHCP on every link), plus its routes. It returns
// the node's address (the first static one, IPv4 first, else the first lease) and the links
// DHCP leased on. Its bonds and VLANs are made first (their kernel modules loaded with load),
// then every link is set as a card is.
func applyPlatformNetwork(n *platform.Network, boot *bootNetwork, load func(module string) error) (netip.Prefix, []string, error) {
	if n == nil || len(n.Links) == 0 {
		if err := boot.Up(); err != nil {
			return netip.Prefix{}, nil, err
		}

		if n != nil {
			if err := addRoutes("", n.Routes); err != nil {
				return netip.Prefix{}, nil, err
			}
		}

		return boot.ip.Address, boot.leased, nil
	}

	if err := loUp(); err != nil {
		return netip.Prefix{}, nil, err
	}

	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return netip.Prefix{}, nil, fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	if err = makeLogical(c, n.Links, load); err != nil {
		return netip.Prefix{}, nil, fmt.Errorf("talos.platform network: %w", err)
	}

	var (
		static, leases []netip.Prefix
		leased         = slices.Clone(boot.leased)
	)

	for i, l := range n.Links {
		name, err := linkName(l)
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("talos.platform network: links[%d]: %w", i, err)
		}

		idx, err := container.LinkIndex(c, name)
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("talos.platform network: %w (is its driver in the initramfs?)", err)
		}

		if l.MTU > 0 {
			if err = c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Attributes: &rtnetlink.LinkAttributes{MTU: uint32(l.MTU)}}); err != nil {
				return netip.Prefix{}, nil, fmt.Errorf("%s: setting MTU %d: %w", name, l.MTU, err)
			}
		}

		if err = container.SetLinkUp(c, idx); err != nil {
			return netip.Prefix{}, nil, err
		}

		for _, a := range l.Addresses {
			if err = container.AddAddress(name, a); err != nil && !errors.Is(err, unix.EEXIST) {
				return netip.Prefix{}, nil, fmt.Errorf("%s: %w", name, err)
			}

			static = append(static, a)

			log("%s: %s", name, a)
		}

		if (l.DHCP4 || l.DHCP6) && !slices.Contains(leased, name) {
			lease, err := acquire(context.Background(), c, name)
			if err != nil {
				log("DHCP on %s: %v", name, err) // the link keeps its static addresses, if any
			} else {
				log("DHCP on %s: %s", name, lease.Address)

				leases, leased = append(leases, lease.Address), append(leased, name)
			}
		}

		if err = addRoutes(name, l.Routes); err != nil {
			return netip.Prefix{}, nil, err
		}
	}

	if err = addRoutes("", n.Routes); err != nil {
		return netip.Prefix{}, nil, err
	}

	// The node's address: IPv4 before IPv6, static before leased, the boot's last.
	all := append(append(static, leases...), boot.ip.Address)
	slices.SortStableFunc(all, func(a, b netip.Prefix) int {
		return map[bool]int{true: 0, false: 1}[a.Addr().Is4()] - map[bool]int{true: 0, false: 1}[b.Addr().Is4()]
	})

	for _, a := range all {
		if a.IsValid() {
			return a, leased, nil
		}
	}

	return netip.Prefix{}, nil, errors.New("talos.platform network: no link got an address: give a link a static address or DHCP")
}

// makeLogical makes the bonds, their members joined (each down first, as the kernel wants, and
// up again), then the VLANs on their parents, as machined's link controller makes them.
func makeLogical(c *rtnetlink.Conn, links []platform.Link, load func(module string) error) error {
	// The kernel's name of a member or parent given by name or MAC.
	name := func(ref string) (string, error) {
		if _, err := net.ParseMAC(ref); err == nil {
			return linkName(platform.Link{MAC: ref})
		}

		return ref, nil
	}

	for _, kind := range []string{"bond", "vlan"} {
		for _, l := range links {
			if l.Kind != kind {
				continue
			}

			if err := load(netlink.Modules[kind]); err != nil {
				return fmt.Errorf("%s %s: loading %s: %w", kind, l.Name, netlink.Modules[kind], err)
			}

			spec := network.LinkSpecSpec{Name: l.Name, Kind: kind, Logical: true}
			index := map[string]uint32{}

			switch {
			case l.Bond != nil:
				var err error
				if spec.BondMaster, err = bondSpec(*l.Bond); err != nil {
					return fmt.Errorf("bond %s: %w", l.Name, err)
				}

			case l.VLAN != nil:
				parent, err := name(l.VLAN.Parent)
				if err != nil {
					return fmt.Errorf("VLAN %s: parent: %w", l.Name, err)
				}

				if index[parent], err = container.LinkIndex(c, parent); err != nil {
					return fmt.Errorf("VLAN %s: %w", l.Name, err)
				}

				spec.ParentName, spec.VLAN = parent, network.VLANSpec{VID: l.VLAN.ID, Protocol: nethelpers.VLANProtocol8021Q}
			default:
				return fmt.Errorf("%s %s: no %s options", kind, l.Name, kind)
			}

			if err := netlink.CreateLogical(c, spec, index); err != nil {
				return err
			}

			log("%s %s created", kind, l.Name)

			if l.Bond == nil {
				continue
			}

			master, err := container.LinkIndex(c, l.Name)
			if err != nil {
				return err
			}

			if l.HardwareAddr != "" {
				// Set before the members join: a bond whose address was set keeps it, else it
				// takes its first member's.
				mac, err := net.ParseMAC(l.HardwareAddr)
				if err != nil {
					return fmt.Errorf("bond %s: hardware address %q: %w", l.Name, l.HardwareAddr, err)
				}

				if err = c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: master, Attributes: &rtnetlink.LinkAttributes{Address: mac}}); err != nil {
					return fmt.Errorf("bond %s: setting its hardware address %s: %w", l.Name, mac, err)
				}

				log("bond %s: hardware address %s", l.Name, mac)
			}

			for _, ref := range l.Bond.Members {
				m, err := name(ref)
				if err != nil {
					return fmt.Errorf("bond %s: member: %w", l.Name, err)
				}

				idx, err := container.LinkIndex(c, m)
				if err != nil {
					return fmt.Errorf("bond %s: %w", l.Name, err)
				}

				if err = netlink.Enslave(c, idx, master); err != nil {
					return fmt.Errorf("bond %s: adding %s: %w", l.Name, m, err)
				}

				if err = container.SetLinkUp(c, idx); err != nil {
					return err
				}

				log("bond %s: member %s", l.Name, m)
			}
		}
	}

	return nil
}

// bondSpec is a platform's bond as the link controller's spec: the named options parsed (the
// platform's parser checked them), the rest the kernel's defaults.
func bondSpec(b platform.Bond) (network.BondMasterSpec, error) {
	s := network.BondMasterSpec{MIIMon: b.MIIMon, UseCarrier: true}

	var err error

	if b.Mode != "" {
		if s.Mode, err = nethelpers.BondModeByName(b.Mode); err != nil {
			return s, fmt.Errorf("mode %q: %w", b.Mode, err)
		}
	}

	if b.HashPolicy != "" {
		if s.HashPolicy, err = nethelpers.BondXmitHashPolicyByName(b.HashPolicy); err != nil {
			return s, fmt.Errorf("hash policy %q: %w", b.HashPolicy, err)
		}
	}

	if b.LACPRate != "" {
		if s.LACPRate, err = nethelpers.LACPRateByName(b.LACPRate); err != nil {
			return s, fmt.Errorf("LACP rate %q: %w", b.LACPRate, err)
		}
	}

	return s, nil
}

// linkName is the kernel's name of a platform's link: its name, or the card's with its MAC.
// A bond's member has the bond's MAC once it joined (made before the cards are configured), so
// a member is known by its permanent MAC, and the bond, which has a member's or its own, is
// passed over.
func linkName(l platform.Link) (string, error) {
	if l.MAC == "" {
		return l.Name, nil
	}

	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}

	for _, i := range ifaces {
		sys := filepath.Join("/sys/class/net", i.Name)
		if _, err := os.Stat(filepath.Join(sys, "bonding")); err == nil {
			continue
		}

		mac := i.HardwareAddr.String()
		if b, err := os.ReadFile(filepath.Join(sys, "bonding_slave", "perm_hwaddr")); err == nil {
			mac = strings.TrimSpace(string(b))
		}

		if strings.EqualFold(mac, l.MAC) {
			return i.Name, nil
		}
	}

	return "", fmt.Errorf("no network card has the MAC address %s", l.MAC)
}

// addRoutes adds routes through link ("": the kernel picks the link that reaches the gateway),
// with upstream's default metrics (1024 for IPv4, 2048 for IPv6) when they name none.
func addRoutes(link string, routes []platform.Route) error {
	if len(routes) == 0 {
		return nil
	}

	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	var idx uint32
	if link != "" {
		if idx, err = container.LinkIndex(c, link); err != nil {
			return err
		}
	}

	for _, r := range routes {
		family, metric := uint8(unix.AF_INET), uint32(network.DefaultRouteMetric)
		if r.Via.Is6() {
			family, metric = unix.AF_INET6, 2*network.DefaultRouteMetric
		}

		if r.Metric != 0 {
			metric = r.Metric
		}

		msg := &rtnetlink.RouteMessage{
			Family: family, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC, Scope: unix.RT_SCOPE_UNIVERSE, Type: unix.RTN_UNICAST,
			Attributes: rtnetlink.RouteAttributes{Gateway: r.Via.AsSlice(), OutIface: idx, Priority: metric},
		}

		to := "default"
		if r.To.IsValid() {
			msg.DstLength, msg.Attributes.Dst, to = uint8(r.To.Bits()), r.To.Addr().AsSlice(), r.To.String()
		}

		if err = c.Route.Add(msg); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding the route to %s via %s: %w", to, r.Via, err)
		}

		log("route to %s via %s (metric %d)", to, r.Via, metric)
	}

	return nil
}
