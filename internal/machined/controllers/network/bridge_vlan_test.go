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

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

// A bridge whose config sets vlan.vlanFiltering is made by the kernel with VLAN filtering on
// (where the kernel has it).
func TestBridgeVLANFilteringFromConfig(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to add a link: run as root under nsrun")
	}

	// This host's kernel may be built without bridge VLAN filtering (it then refuses the
	// bridge): TestBridgeVLANFilteringAndWireguardMarkSpecs proves the spec on any kernel.
	if out, err := exec.Command("ip", "link", "add", "brvprobe0", "type", "bridge", "vlan_filtering", "1").CombinedOutput(); err != nil {
		t.Skipf("this kernel has no bridge VLAN filtering: %s", out)
	}

	exec.Command("ip", "link", "del", "brvprobe0").Run()

	t.Cleanup(func() { exec.Command("ip", "link", "del", "brv9").Run() })

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.SpecController{})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(&v1alpha1.Device{
		DeviceInterface: "brv9",
		DeviceBridge:    &v1alpha1.Bridge{BridgeVLAN: &v1alpha1.BridgeVLAN{BridgeVLANFiltering: new(true)}},
	})))

	testenv.WaitFor(t, "brv9 with VLAN filtering", 10*time.Second, func() error {
		out, err := exec.Command("ip", "-d", "link", "show", "brv9").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}

		if !strings.Contains(string(out), "vlan_filtering 1") {
			return fmt.Errorf("no VLAN filtering: %s", out)
		}

		return nil
	})
}
