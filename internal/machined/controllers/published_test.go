package controllers_test

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/controllers"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/platform"
)

// writtenByMachined are the types machined writes itself, not a controller, with who does.
var writtenByMachined = map[resource.Type]string{
	config.MachineConfigType:       "the config's activation",
	v1alpha1.ServiceType:           "the supervisor's state changes",
	runtimeres.MachineStatusType:   "the sequences (stage) and the services' condition",
	runtimeres.MetaKeyType:         "the META sync",
	resources.JoinDecisionType:     "the API (talosctl join approve|deny)",
	runtimeres.ExtensionStatusType: "the schematic sync at boot (server.SyncSchematic); no system extensions yet",
}

// TestEveryRegisteredTypeHasAWriter: on a process, a container and a metal node, each type the
// node registers (resources.For) is written by one of its controllers or by machined itself:
// none is left empty forever.
func TestEveryRegisteredTypeHasAWriter(t *testing.T) {
	for _, tc := range []struct {
		node configsupport.Node
		opts controllers.Options
	}{
		{configsupport.Process, controllers.Options{Mode: runtime.Mode{Kind: runtime.Process}, Address: "127.5.0.1"}},
		{configsupport.Container, controllers.Options{Mode: runtime.Mode{Kind: runtime.Container, PID1: true, HasContainerd: true, HasKubernetesImages: true},
			Address: "10.5.0.2"}},
		{configsupport.Metal, controllers.Options{Mode: runtime.Mode{Kind: runtime.Metal, PID1: true, HasContainerd: true, HasKubernetesImages: true},
			LoadModuleWith: func(string, []string) error { return nil }, Platform: &platform.Published{}}},
	} {
		written := map[resource.Type]string{}
		for _, ctrl := range controllers.List(tc.opts) {
			for _, out := range ctrl.Outputs() {
				written[out.Type] = ctrl.Name()
			}
		}

		for _, d := range resources.For(tc.node) {
			typ := d.ResourceDefinition().Type
			if written[typ] == "" && writtenByMachined[typ] == "" {
				t.Errorf("%s nodes register %s, but no controller of theirs writes it: add its controller, or leave it unregistered there (resources.onlyOn)", tc.node, typ)
			}
		}
	}
}
