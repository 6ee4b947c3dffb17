package configsupport_test

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/go-pointer"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	networkcfg "github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	kubespanctrl "github.com/talos-go/talos/internal/machined/controllers/kubespan"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// The configs `talosctl gen config` writes, with the hostname every provisioner adds, pass
// Check on every kind of node.
func TestNetworkDefaultConfigsPass(t *testing.T) {
	bundle, err := secrets.NewBundle(secrets.NewClock(), nil)
	require.NoError(t, err)

	in, err := generate.NewInput("net", "https://10.5.0.2:6443", constants.DefaultKubernetesVersion, generate.WithSecretsBundle(bundle))
	require.NoError(t, err)

	for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		cfg, err := in.Config(typ)
		require.NoError(t, err)

		named, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
			c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkHostname: "net-" + typ.String() + "-1"}

			return nil
		})
		require.NoError(t, err)

		for _, node := range []configsupport.Node{configsupport.Process, configsupport.Container, configsupport.Metal} {
			assert.NoError(t, configsupport.Check(cfg, node), "%s on a %s node", typ, node)
			assert.NoError(t, configsupport.Check(named, node), "%s with its hostname on a %s node", typ, node)
		}
	}
}

// A config setting a refused network field is refused, naming the field where it was written;
// a field refused on some kinds of node only passes on the others.
func TestNetworkRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		refusedOn  []configsupport.Node
		path       string
	}{
		{"searchDomains", "machine:\n  network:\n    searchDomains: [example.org]\n", []configsupport.Node{configsupport.Process}, "machine.network.searchDomains[0]"},
		{"ignore", "machine:\n  network:\n    interfaces:\n      - interface: eth1\n        ignore: true\n", notMetal, "machine.network.interfaces[0].ignore"},
		{"bond option", iface("bond0", "bond:\n          mode: 802.3ad\n          lacpRate: fast"), notMetal, "machine.network.interfaces[0].bond.lacpRate"},
		{"bridge VLAN filtering", iface("br0", "bridge:\n          interfaces: [eth1]\n          vlan:\n            vlanFiltering: true"), notMetal,
			"machine.network.interfaces[0].bridge.vlan.vlanFiltering"},
		{"bridgePort", iface("eth1", "bridgePort:\n          master: br0"), notMetal, "machine.network.interfaces[0].bridgePort"},
		{"wireguard firewallMark", iface("wg0", "wireguard:\n          firewallMark: 5"), notMetal, "machine.network.interfaces[0].wireguard.firewallMark"},
		{"vip equinixMetal", iface("eth0", "vip:\n          ip: 10.5.0.50\n          equinixMetal:\n            apiToken: x"), all,
			"machine.network.interfaces[0].vip.equinixMetal"},
		{"vip hcloud", iface("eth0", "vip:\n          ip: 10.5.0.50\n          hcloud:\n            apiToken: x"), all, "machine.network.interfaces[0].vip.hcloud"},
		{"vlan vip equinixMetal", iface("eth0", "vlans:\n          - vlanId: 5\n            vip:\n              equinixMetal:\n                apiToken: x"), all,
			"machine.network.interfaces[0].vlans[0].vip.equinixMetal"},
		{"vlan vip hcloud", iface("eth0", "vlans:\n          - vlanId: 5\n            vip:\n              hcloud:\n                apiToken: x"), all,
			"machine.network.interfaces[0].vlans[0].vip.hcloud"},
		{"EthernetConfig", "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: EthernetConfig\nname: eth0\nrings:\n  rx: 256\n", notMetal, "EthernetConfig(eth0)"},
		{"udev rule", "machine:\n  udev:\n    rules:\n      - 'KERNEL==\"vdb\", SYMLINK+=\"data\"'\n", notMetal, "machine.udev.rules[0]"},
		{"udev rule RUN", "machine:\n  udev:\n    rules:\n      - 'KERNEL==\"vdb\", SYMLINK+=\"data\"'\n      - 'KERNEL==\"vdb\", RUN+=\"/bin/true\"'\n", all, "machine.udev.rules[1]"},
		{"zswap", "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: ZswapConfig\nmaxPoolPercent: 25\n", all, "ZswapConfig"},
		{"interfaces", iface("eth1", "mtu: 1400"), notMetal, "machine.network.interfaces[0].interface"},
		{"kubespan", "machine:\n  network:\n    kubespan:\n      enabled: true\n", notMetal, "machine.network.kubespan.enabled"},
		{"kubespan endpoints", "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: KubeSpanEndpointsConfig\nextraAnnouncedEndpoints: [192.0.2.1:51820]\n",
			notMetal, "KubeSpanEndpointsConfig"},
		{"nameservers", "machine:\n  network:\n    nameservers: [10.5.0.1]\n", []configsupport.Node{configsupport.Process}, "machine.network.nameservers[0]"},
		{"firewall", "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: block\n",
			[]configsupport.Node{configsupport.Process}, "NetworkDefaultActionConfig"},
		{"firewall rule", "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: web\nportSelector:\n  ports: [80]\n  protocol: tcp\n",
			[]configsupport.Node{configsupport.Process}, "NetworkRuleConfig(web)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configloader.NewFromBytes([]byte("version: v1alpha1\n" + tc.yaml))
			require.NoError(t, err)

			for _, node := range all {
				err := configsupport.Check(cfg, node)

				if !slices.Contains(tc.refusedOn, node) {
					assert.NoError(t, err, "on a %s node", node)

					continue
				}

				if assert.Error(t, err, "on a %s node", node) {
					assert.True(t, slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(l string) bool { return strings.HasPrefix(l, tc.path+": ") }),
						"on a %s node: %v, want an error naming %s", node, err, tc.path)
				}
			}
		})
	}
}

var (
	all      = []configsupport.Node{configsupport.Process, configsupport.Container, configsupport.Metal}
	notMetal = []configsupport.Node{configsupport.Process, configsupport.Container}
)

// iface is a config with one machine.network.interfaces entry: the link and more of its fields.
func iface(name, fields string) string {
	return "machine:\n  network:\n    interfaces:\n      - interface: " + name + "\n        " + fields + "\n"
}

// The interface fields the other tests do not set become the specs the network controllers
// apply: a deviceSelector by permanent address picks its link (and not another), the deprecated
// cidr is its address, a route's source, metric and MTU, DHCPv6's DUID, a bond's members by name
// and its up and down delays, a link's bridgePort.master, a VLAN's MTU, cidr, routes, DHCP and its options.
func TestNetworkConfigSpecs(t *testing.T) {
	env := ctest.Start(t, &networkctrl.ConfigSpecController{})

	status := func(name, perm string) *network.LinkStatus {
		mac, err := net.ParseMAC(perm)
		require.NoError(t, err)

		l := network.NewLinkStatus(network.NamespaceName, name)
		l.TypedSpec().Type, l.TypedSpec().PermanentAddr = nethelpers.LinkEther, nethelpers.HardwareAddr(mac)

		return l
	}

	env.Create(status("pa0", "52:54:00:bb:00:01"), status("pa1", "52:54:00:bb:00:02"))

	const duid = "00010001c7d2b0a9525400bb0001"

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkInterfaces: v1alpha1.NetworkDeviceList{
			{DeviceSelector: &v1alpha1.NetworkDeviceSelector{NetworkDevicePermanentAddress: "52:54:00:bb:00:01"}, DeviceCIDR: "10.9.20.5/24"},
			{
				DeviceInterface: "rt0",
				DeviceRoutes:    []*v1alpha1.Route{{RouteNetwork: "10.77.0.0/16", RouteGateway: "10.9.21.1", RouteSource: "10.9.21.5", RouteMetric: 300, RouteMTU: 1300}},
				DeviceDHCP:      pointer.To(true), DeviceDHCPOptions: &v1alpha1.DHCPOptions{DHCPIPv4: pointer.To(false), DHCPIPv6: pointer.To(true), DHCPDUIDv6: duid},
			},
			{DeviceInterface: "bond7", DeviceBond: &v1alpha1.Bond{BondInterfaces: []string{"m0", "m1"}, BondMode: "active-backup", BondUpDelay: 200, BondDownDelay: 300}},
			{DeviceInterface: "bp0", DeviceBridgePort: &v1alpha1.BridgePort{BridgePortMaster: "br3"}},
			{DeviceInterface: "vl0", DeviceVlans: v1alpha1.VlanList{{
				VlanID: 7, VlanMTU: 1400, VlanCIDR: "10.9.22.5/24",
				VlanRoutes:      []*v1alpha1.Route{{RouteNetwork: "10.78.0.0/16", RouteGateway: "10.9.22.1"}},
				VlanDHCP:        pointer.To(true),
				VlanDHCPOptions: &v1alpha1.DHCPOptions{DHCPRouteMetric: 777, DHCPIPv6: pointer.To(true), DHCPDUIDv6: duid},
			}}},
		}}
	}))

	// The selector picks pa0 only; cidr is an address like addresses'.
	ctest.AssertIDs[*network.AddressSpec](env, "pa0/10.9.20.5/24", "vl0.7/10.9.22.5/24")

	ctest.AssertResource(env, network.RouteID(nethelpers.TableMain, nethelpers.FamilyInet4, netip.MustParsePrefix("10.77.0.0/16"), netip.MustParseAddr("10.9.21.1"), 300, "rt0"),
		func(r *network.RouteSpec, a *assert.Assertions) {
			a.Equal("rt0", r.TypedSpec().OutLinkName)
			a.Equal(netip.MustParseAddr("10.9.21.5"), r.TypedSpec().Source)
			a.EqualValues(1300, r.TypedSpec().MTU)
		})

	ctest.AssertResource(env, network.RouteID(nethelpers.TableMain, nethelpers.FamilyInet4, netip.MustParsePrefix("10.78.0.0/16"), netip.MustParseAddr("10.9.22.1"), 1024, "vl0.7"),
		func(r *network.RouteSpec, a *assert.Assertions) { a.Equal("vl0.7", r.TypedSpec().OutLinkName) })

	// DHCP: rt0 asks for DHCPv6 only, with the DUID; the VLAN for both, with the metric.
	ctest.AssertIDs[*network.OperatorSpec](env, "dhcp4/vl0.7", "dhcp6/rt0", "dhcp6/vl0.7")

	for _, id := range []string{"dhcp6/rt0", "dhcp6/vl0.7"} {
		ctest.AssertResource(env, id, func(r *network.OperatorSpec, a *assert.Assertions) { a.Equal(duid, r.TypedSpec().DHCP6.DUID) })
	}

	ctest.AssertResource(env, "dhcp4/vl0.7", func(r *network.OperatorSpec, a *assert.Assertions) {
		a.EqualValues(777, r.TypedSpec().DHCP4.RouteMetric)
	})

	ctest.AssertResource(env, network.LinkID("bond7"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.Equal(nethelpers.BondModeActiveBackup, r.TypedSpec().BondMaster.Mode)
		a.EqualValues(200, r.TypedSpec().BondMaster.UpDelay)
		a.EqualValues(300, r.TypedSpec().BondMaster.DownDelay)
	})

	for i, m := range []string{"m0", "m1"} {
		ctest.AssertResource(env, network.LinkID(m), func(r *network.LinkSpec, a *assert.Assertions) {
			a.Equal("bond7", r.TypedSpec().BondSlave.MasterName)
			a.Equal(i, r.TypedSpec().BondSlave.SlaveIndex)
		})
	}

	ctest.AssertResource(env, network.LinkID("bp0"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.Equal("br3", r.TypedSpec().BridgeSlave.MasterName)
		a.True(r.TypedSpec().Up)
	})

	ctest.AssertResource(env, network.LinkID("vl0.7"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.EqualValues(1400, r.TypedSpec().MTU)
		a.EqualValues(7, r.TypedSpec().VLAN.VID)
		a.Equal("vl0", r.TypedSpec().ParentName)
	})
}

// machine.network.kubespan's options and KubeSpanEndpointsConfig reach the KubeSpan config the
// peer, member and manager controllers act on (TestPeerSpecs, TestMembers show what they do
// with it).
func TestKubeSpanConfigFields(t *testing.T) {
	env := ctest.Start(t, kubespanctrl.NewConfigController())

	mc := ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkKubeSpan: &v1alpha1.NetworkKubeSpan{
			KubeSpanEnabled: pointer.To(true), KubeSpanAdvertiseKubernetesNetworks: pointer.To(true), KubeSpanAllowDownPeerBypass: pointer.To(true),
			KubeSpanHarvestExtraEndpoints: pointer.To(true), KubeSpanMTU: pointer.To(uint32(1380)),
			KubeSpanFilters: &v1alpha1.KubeSpanFilters{KubeSpanFiltersEndpoints: []string{"0.0.0.0/0", "!10.9.0.0/16"}},
		}}
	})

	endpoints := networkcfg.NewKubespanEndpointsV1Alpha1()
	endpoints.ExtraAnnouncedEndpointsConfig = []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:51820")}

	docs, err := container.New(append(mc.Provider().Documents(), endpoints)...)
	require.NoError(t, err)

	env.Put(configres.NewMachineConfig(docs))

	ctest.AssertResource(env, kubespan.ConfigID, func(r *kubespan.Config, a *assert.Assertions) {
		s := r.TypedSpec()
		a.True(s.Enabled)
		a.True(s.AdvertiseKubernetesNetworks)
		a.False(s.ForceRouting, "allowDownPeerBypass lets traffic bypass a down peer")
		a.True(s.HarvestExtraEndpoints)
		a.EqualValues(1380, s.MTU)
		a.Equal([]string{"0.0.0.0/0", "!10.9.0.0/16"}, s.EndpointFilters)
		a.Equal([]netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:51820")}, s.ExtraEndpoints)
	})
}
