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

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
	"github.com/talos-go/talos/internal/testenv"
)

// machine.network.interfaces[].ignore leaves a link alone: the boot's DHCP lease on it (the
// boot leases on every link before it reads the config) is taken away and not renewed, and the
// entry's own `dhcp: true` starts no DHCP; once the config stops ignoring it, the node leases on
// it again.
func TestDHCP4IgnoredLink(t *testing.T) {
	mac := clientLink(t, "ign0", "ign1")

	startDHCPServer(t, "ign1", vm.NetworkSpec{
		Bridge: "ign1", Gateway: netip.MustParsePrefix("10.9.13.1/24"),
		Nodes: []vm.NodeLease{{Name: "node-1", MAC: mac.String(), Address: netip.MustParseAddr("10.9.13.2")}},
	})

	// The boot's lease, as internal/metal applies it.
	for _, args := range [][]string{{"link", "set", "ign0", "up"}, {"addr", "add", "10.9.13.2/24", "dev", "ign0"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	ipAddrs := func() string {
		out, _ := exec.Command("ip", "-o", "-4", "addr", "show", "ign0").CombinedOutput()

		return string(out)
	}

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.DHCP4Controller{Links: []string{"ign0"}, Retry: time.Second},
		&networkctrl.SpecController{})

	ignored := &v1alpha1.Device{DeviceInterface: "ign0", DeviceIgnore: new(true), DeviceDHCP: new(true)}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(ignored)))

	testenv.WaitFor(t, "the boot's lease gone from the ignored link", 10*time.Second, func() error {
		if addrs := ipAddrs(); strings.Contains(addrs, "10.9.13.2") {
			return fmt.Errorf("still:\n%s", addrs)
		}

		return nil
	})

	ctest.AssertNoResource[*network.OperatorSpec](env, "dhcp4/ign0")
	ctest.AssertNoResource[*network.AddressSpec](env, "operator/ign0/10.9.13.2/24")

	// Not ignored any more: the boot link's lease is kept again.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))

	ctest.AssertIDs[*network.AddressSpec](env, "operator/ign0/10.9.13.2/24")
	testenv.WaitFor(t, "the lease back on the link", 10*time.Second, func() error {
		if addrs := ipAddrs(); !strings.Contains(addrs, "10.9.13.2/24") {
			return fmt.Errorf("addresses:\n%s", addrs)
		}

		return nil
	})
}
