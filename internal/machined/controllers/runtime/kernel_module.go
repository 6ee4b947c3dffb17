package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	cfgtypes "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
	"github.com/talos-go/talos/internal/metal"
)

// KernelModuleController loads the config's machine.kernel.modules with their parameters, at
// boot and when the config adds one, and publishes each as upstream's KernelModuleSpec (by
// name). A module the node's image lacks, or one the kernel refuses, is an error naming its
// field, logged on the console; the others still load. The kernel sets a module's parameters
// when it loads it only: a module loaded already keeps its own (as upstream's).
type KernelModuleController struct {
	// Load loads a module and what it depends on, with the parameters for the module itself.
	Load func(name string, params []string) error
}

// Name implements controller.Controller.
func (ctrl *KernelModuleController) Name() string { return "runtime.KernelModuleController" }

// Inputs implements controller.Controller.
func (ctrl *KernelModuleController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *KernelModuleController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.KernelModuleSpecType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *KernelModuleController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		var err error

		var modules []cfgtypes.KernelModule
		if cfg != nil && cfg.Config().Machine() != nil {
			modules = cfg.Config().Machine().Kernel().Modules()
		}

		r.StartTrackingOutputs()

		for _, m := range modules {
			if m.Name() == "" {
				continue // LoadKernelModules says so
			}

			if err = safe.WriterModify(ctx, r, runtimeres.NewKernelModuleSpec(runtimeres.NamespaceName, m.Name()), func(res *runtimeres.KernelModuleSpec) error {
				*res.TypedSpec() = runtimeres.KernelModuleSpecSpec{Name: m.Name(), Parameters: m.Parameters()}

				return nil
			}); err != nil {
				return fmt.Errorf("writing the spec of module %s: %w", m.Name(), err)
			}
		}

		if err = safe.CleanupOutputs[*runtimeres.KernelModuleSpec](ctx, r); err != nil {
			return err
		}

		for _, err := range LoadKernelModules(modules, ctrl.Load) {
			log.Error("kernel module not loaded", zap.Error(err))
		}

		return nil
	})
}

// LoadKernelModules loads modules in order with load, and returns an error for each one that
// did not load, naming its field: machine.kernel.modules[i].name for a module the node has not,
// machine.kernel.modules[i].parameters for one the kernel refused.
func LoadKernelModules(modules []cfgtypes.KernelModule, load func(name string, params []string) error) []error {
	var errs []error

	for i, m := range modules {
		if m.Name() == "" {
			errs = append(errs, fmt.Errorf("machine.kernel.modules[%d].name: empty: name the module (dummy, br_netfilter)", i))

			continue
		}

		err := load(m.Name(), m.Parameters())

		switch {
		case err == nil:
		case errors.Is(err, metal.ErrNoModule):
			errs = append(errs, fmt.Errorf("machine.kernel.modules[%d].name: %w: the node's image carries no module %q (only its boot modules); remove it, or build the image with it", i, err, m.Name()))
		default:
			errs = append(errs, fmt.Errorf("machine.kernel.modules[%d].parameters: %w: check the module's parameters", i, err))
		}
	}

	return errs
}
