package machined

import (
	"net"
	"os"
	"slices"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/platform"
)

// bootDHCPLinks are the links a metal boot leased addresses on (no ip= on the kernel's command
// line): those not in talos.network.interface.ignore that have a global IPv4 address (DHCPv4)
// or, v6, a global IPv6 /128 (DHCPv6's; router advertisements' are /64). machined keeps their
// leases. A platform that configured the links (nocloud's network-config) names those it
// leased on: a static address is no lease.
func bootDHCPLinks(mode runtime.Mode, published *platform.Published, v6 bool) []string {
	if !mode.OwnKernel() {
		return nil
	}

	if published != nil && published.Network != nil && len(published.Network.Links) > 0 {
		return published.DHCPLinks
	}

	data, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil
	}

	cmdline := metal.ParseCmdline(string(data))
	if cmdline.Get("ip") != "" {
		return nil
	}

	ignore := cmdline.List("talos.network.interface.ignore")

	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}

	var links []string

	for _, iface := range ifaces {
		if iface.Flags&net.FlagLoopback != 0 || slices.Contains(ignore, iface.Name) {
			continue
		}

		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() {
				continue
			}

			if ones, _ := ipn.Mask.Size(); (!v6 && ipn.IP.To4() != nil) || (v6 && ipn.IP.To4() == nil && ones == 128) {
				links = append(links, iface.Name)

				break
			}
		}
	}

	return links
}
