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
