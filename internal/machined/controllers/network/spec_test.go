package network_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

func interfacesConfig(devices ...*v1alpha1.Device) func(*v1alpha1.Config) {
	return func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkInterfaces: devices}
	}
}

// machine.network.interfaces becomes link, address and route specs, which SpecController sets
// on a real link (a veth, in the test's network namespace); an address dropped from the
// config is removed from the link.
func TestConfigSpecsOnALink(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to add a link: run as root under nsrun")
	}

	for _, args := range [][]string{{"link", "add", "spec0", "type", "veth", "peer", "name", "spec1"}, {"link", "set", "spec1", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	t.Cleanup(func() { exec.Command("ip", "link", "del", "spec0").Run() })

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.SpecController{})

	device := &v1alpha1.Device{
		DeviceInterface: "spec0",
		DeviceAddresses: []string{"10.9.0.5/24", "10.9.1.5/24"},
		DeviceMTU:       1400,
		DeviceRoutes:    []*v1alpha1.Route{{RouteNetwork: "10.77.0.0/16", RouteGateway: "10.9.0.1"}},
	}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(device)))

	ctest.AssertResource(env, network.LinkID("spec0"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.True(r.TypedSpec().Up)
		a.EqualValues(1400, r.TypedSpec().MTU)
	})
	ctest.AssertIDs[*network.AddressSpec](env, "spec0/10.9.0.5/24", "spec0/10.9.1.5/24")
	ctest.AssertIDs[*network.RouteSpec](env, "inet4/10.9.0.1/10.77.0.0/16/1024")

	ipOut := func(args ...string) string {
		out, _ := exec.Command("ip", args...).CombinedOutput()

		return string(out)
	}

	testenv.WaitFor(t, "the link, its addresses and the route", 10*time.Second, func() error {
		link, addrs, routes := ipOut("link", "show", "spec0"), ipOut("-o", "addr", "show", "spec0"), ipOut("route", "show", "10.77.0.0/16")
		if !strings.Contains(link, "mtu 1400") || !strings.Contains(link, ",UP") ||
			!strings.Contains(addrs, "10.9.0.5/24") || !strings.Contains(addrs, "10.9.1.5/24") ||
			!strings.Contains(routes, "via 10.9.0.1 dev spec0") || !strings.Contains(routes, "metric 1024") {
			return fmt.Errorf("link:\n%saddresses:\n%sroutes:\n%s", link, addrs, routes)
		}

		return nil
	})

	device.DeviceAddresses = []string{"10.9.0.5/24"}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(device)))

	testenv.WaitFor(t, "10.9.1.5 removed", 10*time.Second, func() error {
		if addrs := ipOut("-o", "addr", "show", "spec0"); strings.Contains(addrs, "10.9.1.5") || !strings.Contains(addrs, "10.9.0.5/24") {
			return fmt.Errorf("addresses:\n%s", addrs)
		}

		return nil
	})
}

// A bridge from the config is made with its spanning tree on and its members joined (one listed
// in bridge.interfaces, one naming it in its own bridgePort.master), gets its address, releases
// a member the config drops, and goes (releasing its members) when the config drops it.
func TestBridgeFromConfig(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to add a link: run as root under nsrun")
	}

	for _, pair := range [][2]string{{"brm0", "brm1"}, {"brp0", "brp1"}} {
		if out, err := exec.Command("ip", "link", "add", pair[0], "type", "veth", "peer", "name", pair[1]).CombinedOutput(); err != nil {
			t.Fatalf("ip link add %s: %v: %s", pair[0], err, out)
		}
	}

	t.Cleanup(func() {
		exec.Command("ip", "link", "del", "brm0").Run()
		exec.Command("ip", "link", "del", "brp0").Run()
		exec.Command("ip", "link", "del", "br9").Run()
	})

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.SpecController{})

	bridge := &v1alpha1.Device{
		DeviceInterface: "br9",
		DeviceAddresses: []string{"10.9.9.5/24"},
		DeviceBridge:    &v1alpha1.Bridge{BridgedInterfaces: []string{"brm0"}, BridgeSTP: &v1alpha1.STP{STPEnabled: new(true)}},
	}
	port := &v1alpha1.Device{DeviceInterface: "brp0", DeviceBridgePort: &v1alpha1.BridgePort{BridgePortMaster: "br9"}}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(bridge, port)))

	ipOut := func(args ...string) string {
		out, _ := exec.Command("ip", args...).CombinedOutput()

		return string(out)
	}

	testenv.WaitFor(t, "br9 with STP, its members and its address", 10*time.Second, func() error {
		br, member, addrs := ipOut("-d", "link", "show", "br9"), ipOut("link", "show", "brm0"), ipOut("-o", "addr", "show", "br9")
		portLink := ipOut("link", "show", "brp0")
		if !strings.Contains(br, "stp_state 1") || !strings.Contains(member, "master br9") || !strings.Contains(portLink, "master br9") ||
			!strings.Contains(addrs, "10.9.9.5/24") {
			return fmt.Errorf("bridge:\n%smember:\n%sbridgePort member:\n%saddresses:\n%s", br, member, portLink, addrs)
		}

		return nil
	})

	// Members the config drops are released, by either form; the bridge stays.
	bridge.DeviceBridge.BridgedInterfaces = nil
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(bridge, &v1alpha1.Device{DeviceInterface: "brp0"})))

	testenv.WaitFor(t, "brm0 and brp0 released from br9", 10*time.Second, func() error {
		for _, m := range []string{"brm0", "brp0"} {
			if member := ipOut("link", "show", m); strings.Contains(member, "master") {
				return fmt.Errorf("%s still a member:\n%s", m, member)
			}
		}

		if _, err := exec.Command("ip", "link", "show", "br9").CombinedOutput(); err != nil {
			return fmt.Errorf("br9 is gone: %w", err)
		}

		return nil
	})

	bridge.DeviceBridge.BridgedInterfaces = []string{"brm0"}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(bridge)))

	testenv.WaitFor(t, "brm0 back in br9", 10*time.Second, func() error {
		if member := ipOut("link", "show", "brm0"); !strings.Contains(member, "master br9") {
			return fmt.Errorf("brm0:\n%s", member)
		}

		return nil
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))

	testenv.WaitFor(t, "br9 removed", 10*time.Second, func() error {
		if out, err := exec.Command("ip", "link", "show", "br9").CombinedOutput(); err == nil {
			return fmt.Errorf("br9 still there:\n%s", out)
		}

		if member := ipOut("link", "show", "brm0"); strings.Contains(member, "master") {
			return fmt.Errorf("brm0 still a member:\n%s", member)
		}

		return nil
	})
}

// deviceSelector picks a link by what its status shows (its hardware address here): the link
// gets the address; another link does not.
func TestDeviceSelectorPicksTheLink(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to add a link: run as root under nsrun")
	}

	for _, args := range [][]string{
		{"link", "add", "sel0", "address", "52:54:00:aa:00:01", "type", "veth", "peer", "name", "sel1", "address", "52:54:00:aa:00:02"},
		{"link", "set", "sel1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	t.Cleanup(func() { exec.Command("ip", "link", "del", "sel0").Run() })

	env := ctest.Start(t, &networkctrl.LinkStatusController{}, &networkctrl.ConfigSpecController{}, &networkctrl.SpecController{})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(&v1alpha1.Device{
		DeviceSelector:  &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:aa:00:0*"},
		DeviceAddresses: []string{"10.9.6.5/24"},
	}, &v1alpha1.Device{
		DeviceSelector:  &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:aa:00:02"},
		DeviceAddresses: []string{"10.9.6.6/24"},
	})))

	ctest.AssertIDs[*network.AddressSpec](env, "sel0/10.9.6.5/24", "sel1/10.9.6.5/24", "sel1/10.9.6.6/24")

	testenv.WaitFor(t, "the selected links' addresses", 10*time.Second, func() error {
		out, _ := exec.Command("ip", "-o", "addr", "show", "sel0").CombinedOutput()
		if !strings.Contains(string(out), "10.9.6.5/24") || strings.Contains(string(out), "10.9.6.6") {
			return fmt.Errorf("sel0:\n%s", out)
		}

		return nil
	})
}

// machine.network.interfaces[].dummy is a logical link spec of kind dummy with the entry's
// addresses, as upstream's.
func TestDummyLinkSpecFromConfig(t *testing.T) {
	env := ctest.Start(t, &networkctrl.ConfigSpecController{})

	dummy := &v1alpha1.Device{DeviceInterface: "dummy9", DeviceDummy: new(true), DeviceAddresses: []string{"10.9.8.5/32"}}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(dummy)))

	ctest.AssertResource(env, network.LinkID("dummy9"), func(r *network.LinkSpec, a *assert.Assertions) {
		a.True(r.TypedSpec().Logical)
		a.True(r.TypedSpec().Up)
		a.Equal("dummy", r.TypedSpec().Kind)
		a.Equal(nethelpers.LinkEther, r.TypedSpec().Type)
	})
	ctest.AssertIDs[*network.AddressSpec](env, "dummy9/10.9.8.5/32")
}
