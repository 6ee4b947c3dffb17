package network_test

import (
	"net/netip"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

func TestStaticNodeAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, prefix string
	}{
		{"127.5.0.2", "127.5.0.2/32"},
		{"fd00::5", "fd00::5/128"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			env := ctest.Start(t, &networkctrl.NodeAddressController{Static: []netip.Addr{netip.MustParseAddr(tc.addr)}})

			// A process-mode node: every ID a consumer looks for carries its one loopback
			// address, as a host prefix.
			ids := []resource.ID{
				network.NodeAddressAccumulativeID, network.NodeAddressCurrentID,
				network.NodeAddressDefaultID, network.NodeAddressRoutedID,
			}

			ctest.AssertResources(env, ids, func(r *network.NodeAddress, a *assert.Assertions) {
				a.Equal([]netip.Prefix{netip.MustParsePrefix(tc.prefix)}, r.TypedSpec().Addresses)
				a.Equal([]netip.Addr{netip.MustParseAddr(tc.addr)}, r.TypedSpec().IPs())
			})
			ctest.AssertIDs[*network.NodeAddress](env, ids...)
		})
	}
}

// link and address are what the link and address status controllers publish.
func link(name string, index uint32, typ nethelpers.LinkType) *network.LinkStatus {
	res := network.NewLinkStatus(network.NamespaceName, name)
	res.TypedSpec().Index, res.TypedSpec().Type = index, typ

	return res
}

func address(linkName string, index uint32, prefix string, scope nethelpers.Scope) *network.AddressStatus {
	p := netip.MustParsePrefix(prefix)
	res := network.NewAddressStatus(network.NamespaceName, network.AddressID(linkName, p))
	res.TypedSpec().Address, res.TypedSpec().LinkName, res.TypedSpec().LinkIndex, res.TypedSpec().Scope = p, linkName, index, scope

	return res
}

// TestNodeAddressFromStatus: a node in its own network namespace is reached on the global
// unicast addresses of its links that are not loopback, IPv4 first; the default is the first,
// and the accumulative set keeps every address the node ever had.
func TestNodeAddressFromStatus(t *testing.T) {
	env := ctest.Start(t, &networkctrl.NodeAddressController{})

	v6 := address("eth0", 2, "fd00:5::2/64", nethelpers.ScopeGlobal)
	v4 := address("eth0", 2, "10.5.0.2/24", nethelpers.ScopeGlobal)

	env.Create(
		link("lo", 1, nethelpers.LinkLoopbck), link("eth0", 2, nethelpers.LinkEther),
		address("lo", 1, "127.0.0.1/8", nethelpers.ScopeGlobal),  // on loopback
		address("eth0", 2, "fe80::1/64", nethelpers.ScopeLink),   // link-local
		address("eth0", 2, "10.5.0.99/24", nethelpers.ScopeHost), // not global scope
		v6, v4,
	)

	assertAddresses := func(id resource.ID, want ...string) {
		t.Helper()

		ctest.AssertResource(env, id, func(r *network.NodeAddress, a *assert.Assertions) {
			got := make([]string, 0, len(r.TypedSpec().Addresses))
			for _, p := range r.TypedSpec().Addresses {
				got = append(got, p.String())
			}

			a.Equal(want, got)
		})
	}

	assertAddresses(network.NodeAddressCurrentID, "10.5.0.2/24", "fd00:5::2/64")
	assertAddresses(network.NodeAddressRoutedID, "10.5.0.2/24", "fd00:5::2/64")
	assertAddresses(network.NodeAddressDefaultID, "10.5.0.2/24")

	// The IPv4 address goes (DHCP lease lost): current follows, accumulative remembers.
	env.Destroy(v4)

	assertAddresses(network.NodeAddressCurrentID, "fd00:5::2/64")
	assertAddresses(network.NodeAddressDefaultID, "fd00:5::2/64")
	assertAddresses(network.NodeAddressAccumulativeID, "10.5.0.2/24", "fd00:5::2/64")
}

// TestNodeAddressSortAlgorithm: machine.features.nodeAddressSortAlgorithm orders the node's
// addresses, and so picks its default one: v1 (also without a config) by address, v2 the more
// specific prefix first.
func TestNodeAddressSortAlgorithm(t *testing.T) {
	env := ctest.Start(t, &networkctrl.NodeAddressController{}, networkctrl.NewNodeAddressSortAlgorithmController())

	env.Create(
		link("eth0", 2, nethelpers.LinkEther),
		address("eth0", 2, "10.0.0.5/8", nethelpers.ScopeGlobal),
		address("eth0", 2, "10.5.0.2/24", nethelpers.ScopeGlobal),
		address("eth0", 2, "fd00::5/16", nethelpers.ScopeGlobal),
		address("eth0", 2, "fd00:1::2/64", nethelpers.ScopeGlobal),
	)

	assertOrder := func(algorithm nethelpers.AddressSortAlgorithm, current ...string) {
		t.Helper()

		ctest.AssertResource(env, network.NodeAddressCurrentID, func(r *network.NodeAddress, a *assert.Assertions) {
			got := make([]string, 0, len(r.TypedSpec().Addresses))
			for _, p := range r.TypedSpec().Addresses {
				got = append(got, p.String())
			}

			a.Equal(current, got)
			a.Equal(algorithm, r.TypedSpec().SortAlgorithm)
		})
		ctest.AssertResource(env, network.NodeAddressDefaultID, func(r *network.NodeAddress, a *assert.Assertions) {
			a.Equal([]netip.Prefix{netip.MustParsePrefix(current[0])}, r.TypedSpec().Addresses)
		})
	}

	assertOrder(nethelpers.AddressSortAlgorithmV1, "10.0.0.5/8", "10.5.0.2/24", "fd00::5/16", "fd00:1::2/64")

	env.Create(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineFeatures = &v1alpha1.FeaturesConfig{FeatureNodeAddressSortAlgorithm: "v2"}
	}))
	ctest.AssertResource(env, network.NodeAddressSortAlgorithmID, func(r *network.NodeAddressSortAlgorithm, a *assert.Assertions) {
		a.Equal(nethelpers.AddressSortAlgorithmV2, r.TypedSpec().Algorithm)
	})
	assertOrder(nethelpers.AddressSortAlgorithmV2, "10.5.0.2/24", "10.0.0.5/8", "fd00:1::2/64", "fd00::5/16")

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	assertOrder(nethelpers.AddressSortAlgorithmV1, "10.0.0.5/8", "10.5.0.2/24", "fd00::5/16", "fd00:1::2/64")
}

// TestExternalAddresses: the platform's external addresses are addresses of the link
// "external" (as upstream), current and accumulative but neither routed nor the default.
func TestExternalAddresses(t *testing.T) {
	env := ctest.Start(t, &networkctrl.NodeAddressController{},
		&networkctrl.ExternalAddressController{Addresses: []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2600:1f18::10")}})

	env.Create(link("eth0", 2, nethelpers.LinkEther), address("eth0", 2, "10.5.0.2/24", nethelpers.ScopeGlobal))

	ctest.AssertResources(env, []resource.ID{"external/203.0.113.10/32", "external/2600:1f18::10/128"}, func(r *network.AddressStatus, a *assert.Assertions) {
		spec := r.TypedSpec()

		a.Equal(networkctrl.ExternalLink, spec.LinkName)
		a.Equal(nethelpers.ScopeGlobal, spec.Scope)
		a.Equal(map[bool]nethelpers.Family{true: nethelpers.FamilyInet4, false: nethelpers.FamilyInet6}[spec.Address.Addr().Is4()], spec.Family)
	})

	for id, want := range map[resource.ID][]string{
		network.NodeAddressCurrentID:      {"10.5.0.2/24", "203.0.113.10/32", "2600:1f18::10/128"},
		network.NodeAddressAccumulativeID: {"10.5.0.2/24", "203.0.113.10/32", "2600:1f18::10/128"},
		network.NodeAddressRoutedID:       {"10.5.0.2/24"},
		network.NodeAddressDefaultID:      {"10.5.0.2/24"},
	} {
		ctest.AssertResource(env, id, func(r *network.NodeAddress, a *assert.Assertions) {
			got := make([]string, 0, len(r.TypedSpec().Addresses))
			for _, p := range r.TypedSpec().Addresses {
				got = append(got, p.String())
			}

			a.Equal(want, got, id)
		})
	}
}
