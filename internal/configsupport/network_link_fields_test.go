package configsupport_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// TestBridgeVLANFilteringAndWireguardMarkSpecs: a bridge's vlan.vlanFiltering and a WireGuard
// link's firewallMark reach the link specs the link controller applies (it sets the bridge's
// IFLA_BR_VLAN_FILTERING and the device's fwmark from them); unset, both stay off.
func TestBridgeVLANFilteringAndWireguardMarkSpecs(t *testing.T) {
	env := ctest.Start(t, &networkctrl.ConfigSpecController{})

	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}

	devices := func(filtering bool, mark int) func(*v1alpha1.Config) {
		return func(c *v1alpha1.Config) {
			c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkInterfaces: v1alpha1.NetworkDeviceList{
				{DeviceInterface: "br5", DeviceBridge: &v1alpha1.Bridge{
					BridgedInterfaces: []string{"brp0"}, BridgeVLAN: &v1alpha1.BridgeVLAN{BridgeVLANFiltering: new(filtering)},
				}},
				{DeviceInterface: "wg5", DeviceWireguardConfig: &v1alpha1.DeviceWireguardConfig{
					WireguardPrivateKey: key.String(), WireguardListenPort: 51820, WireguardFirewallMark: mark,
				}},
			}}
		}
	}

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, devices(true, 0x42)))

	ctest.AssertResource(env, network.LinkID("br5"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.Equal("bridge", r.TypedSpec().Kind)
		a.True(r.TypedSpec().BridgeMaster.VLAN.FilteringEnabled)
	})
	ctest.AssertResource(env, network.LinkID("wg5"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.Equal("wireguard", r.TypedSpec().Kind)
		a.EqualValues(0x42, r.TypedSpec().Wireguard.FirewallMark)
		a.Equal(key.String(), r.TypedSpec().Wireguard.PrivateKey)
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, devices(false, 0)))

	ctest.AssertResource(env, network.LinkID("br5"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.False(r.TypedSpec().BridgeMaster.VLAN.FilteringEnabled)
	})
	ctest.AssertResource(env, network.LinkID("wg5"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.Zero(r.TypedSpec().Wireguard.FirewallMark)
	})
}
