package network_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
	"github.com/talos-go/talos/internal/testenv"
)

// `dhcpOptions: {ipv4: false, ipv6: true}` makes a DHCP6 operator spec only, and DHCP6Controller
// leases the network's ::N over DHCPv6 from the qemu network's server: a /128 address that
// SpecController sets, its name servers as a resolver spec; it renews the lease at T1 (RENEW),
// and when the server is gone and the lease runs out, the address goes.
func TestDHCP6FromTheConfig(t *testing.T) {
	mac := clientLink(t, "dhcp60", "dhcp61")

	const addr = "fd74:616c:a09:600::2"

	server := startDHCPServer(t, "dhcp61", vm.NetworkSpec{
		Bridge: "dhcp61", IPv6: netip.MustParsePrefix("fd74:616c:a09:600::/64"), LeaseTime: 6 * time.Second,
		Nameservers: []netip.Addr{netip.MustParseAddr("fd74:616c:a09:600::53")},
		Nodes:       []vm.NodeLease{{Name: "node-1", MAC: mac.String(), Address6: netip.MustParseAddr(addr)}},
	})

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.DHCP4Controller{Retry: time.Second},
		&networkctrl.DHCP6Controller{Retry: time.Second}, &networkctrl.SpecController{})

	dhcp := &v1alpha1.Device{DeviceInterface: "dhcp60", DeviceDHCP: new(true), DeviceDHCPOptions: &v1alpha1.DHCPOptions{DHCPIPv4: new(false), DHCPIPv6: new(true)}}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(dhcp)))

	ctest.AssertIDs[*network.OperatorSpec](env, "dhcp6/dhcp60")
	ctest.AssertIDs[*network.AddressSpec](env, "operator/dhcp60/"+addr+"/128")
	ctest.AssertResource(env, "operator/dhcp6/dhcp60", func(r *network.ResolverSpec, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("fd74:616c:a09:600::53")}, r.TypedSpec().DNSServers)
	})

	ipOut := func(args ...string) string {
		out, _ := exec.Command("ip", args...).CombinedOutput()

		return string(out)
	}

	testenv.WaitFor(t, "the leased address on dhcp60", 10*time.Second, func() error {
		if addrs := ipOut("-o", "addr", "show", "dhcp60"); !strings.Contains(addrs, addr+"/128") {
			return fmt.Errorf("addresses:\n%s", addrs)
		}

		return nil
	})

	// A 6 s lease is renewed every 3 s.
	testenv.WaitFor(t, "two renewals", 20*time.Second, func() error {
		if n := server.renewals.Load(); n < 2 {
			return fmt.Errorf("%d renewals", n)
		}

		return nil
	})

	ctest.AssertIDs[*network.AddressSpec](env, "operator/dhcp60/"+addr+"/128")

	// No server: the lease runs out, and its address goes.
	server.srv.Close()

	testenv.WaitFor(t, "the address gone with the lease", 30*time.Second, func() error {
		if addrs := ipOut("-o", "addr", "show", "dhcp60"); strings.Contains(addrs, addr) {
			return fmt.Errorf("still:\n%s", addrs)
		}

		return nil
	})
}
