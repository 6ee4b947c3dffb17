package network_test

import (
	"net/netip"
	"regexp"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

func nodeAddress(id string, prefixes ...string) *network.NodeAddress {
	res := network.NewNodeAddress(network.NamespaceName, id)
	for _, p := range prefixes {
		res.TypedSpec().Addresses = append(res.TypedSpec().Addresses, netip.MustParsePrefix(p))
	}

	return res
}

func withHostname(name string) func(*v1alpha1.Config) {
	return func(c *v1alpha1.Config) {
		if c.MachineConfig.MachineNetwork == nil {
			c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{}
		}

		c.MachineConfig.MachineNetwork.NetworkHostname = name
	}
}

func TestHostnameSpec(t *testing.T) {
	env := ctest.Start(t, networkctrl.NewHostnameSpecController("127.5.0.2", ""))

	assertSpec := func(hostname, domain string, layer network.ConfigLayer) {
		t.Helper()

		ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameSpec, a *assert.Assertions) {
			a.Equal(hostname, r.TypedSpec().Hostname)
			a.Equal(domain, r.TypedSpec().Domainname)
			a.Equal(layer, r.TypedSpec().ConfigLayer)
		})
	}

	generated := networkctrl.GeneratedHostname("127.5.0.2")

	// Before any config (maintenance mode): generated from the address the node was started
	// with. The default NodeAddress is the input; other IDs are not.
	addr := nodeAddress(network.NodeAddressDefaultID, "127.5.0.2/32")
	env.Create(nodeAddress(network.NodeAddressCurrentID, "10.9.9.9/32"), addr)
	assertSpec(generated, "", network.ConfigDefault)

	// A config without a hostname keeps the generated one; machine.network.hostname wins, split
	// at its first dot into hostname and domain.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	assertSpec(generated, "", network.ConfigDefault)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withHostname("node1.example.org")))
	assertSpec("node1", "example.org", network.ConfigMachineConfiguration)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withHostname("node2")))
	assertSpec("node2", "", network.ConfigMachineConfiguration)

	// The hostname goes from the config: generated again.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	assertSpec(generated, "", network.ConfigDefault)

	// Without its input the spec goes.
	env.Destroy(addr)
	ctest.AssertNoResource[*network.HostnameSpec](env, network.HostnameID)
}

func TestHostnameSpecKeepsItsSeed(t *testing.T) {
	env := ctest.Start(t, networkctrl.NewHostnameSpecController("10.5.0.2", ""))

	// Links come up with other addresses later (DHCP): the generated name does not change.
	addr := nodeAddress(network.NodeAddressDefaultID)
	env.Create(addr)

	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameSpec, a *assert.Assertions) {
		a.Equal(networkctrl.GeneratedHostname("10.5.0.2"), r.TypedSpec().Hostname)
	})

	ctest.Update(env, addr, func(r *network.NodeAddress) error {
		r.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("192.168.1.20/24")}

		return nil
	})

	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameSpec, a *assert.Assertions) {
		a.Equal(networkctrl.GeneratedHostname("10.5.0.2"), r.TypedSpec().Hostname)
		a.Equal(network.ConfigDefault, r.TypedSpec().ConfigLayer)
	})
}

// A platform's hostname (nocloud's local-hostname) is under the config's and over the
// generated one.
func TestHostnameSpecFromPlatform(t *testing.T) {
	env := ctest.Start(t, networkctrl.NewHostnameSpecController("10.5.0.2", "node-1.lab.example"))
	env.Create(nodeAddress(network.NodeAddressDefaultID))

	assertSpec := func(hostname, domain string, layer network.ConfigLayer) {
		t.Helper()

		ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameSpec, a *assert.Assertions) {
			a.Equal(hostname, r.TypedSpec().Hostname)
			a.Equal(domain, r.TypedSpec().Domainname)
			a.Equal(layer, r.TypedSpec().ConfigLayer)
		})
	}

	assertSpec("node-1", "lab.example", network.ConfigPlatform)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	assertSpec("node-1", "lab.example", network.ConfigPlatform)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withHostname("cp-1")))
	assertSpec("cp-1", "", network.ConfigMachineConfiguration)
}

func TestGeneratedHostname(t *testing.T) {
	shape := regexp.MustCompile(`^talos-[a-z0-9]{3}-[a-z0-9]{3}$`)
	seen := map[string]string{}

	for _, seed := range []string{"", "127.5.0.2", "127.5.0.3", "10.5.0.2", "fd00::2"} {
		name := networkctrl.GeneratedHostname(seed)

		assert.Regexp(t, shape, name, "seed %q", seed)
		assert.Equal(t, name, networkctrl.GeneratedHostname(seed), "seed %q: not stable", seed)

		if other, dup := seen[name]; dup {
			t.Errorf("seeds %q and %q share the hostname %s", seed, other, name)
		}

		seen[name] = seed
	}

	// Nodes keep their names across upgrades: the mapping itself must not change.
	assert.Equal(t, "talos-2a4-kbv", networkctrl.GeneratedHostname("127.5.0.2"))
}
