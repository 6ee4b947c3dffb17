package runtime

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// KernelCmdlineController publishes the kernel's command line (KernelCmdline) as the kernel
// booted with it: a metal node's only, as a container or process node's /proc/cmdline is the
// host's.
type KernelCmdlineController struct {
	Path string // /proc/cmdline
}

// Name implements controller.Controller.
func (ctrl *KernelCmdlineController) Name() string { return "runtime.KernelCmdlineController" }

// Inputs implements controller.Controller.
func (ctrl *KernelCmdlineController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *KernelCmdlineController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.KernelCmdlineType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *KernelCmdlineController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	b, err := os.ReadFile(ctrl.Path)
	if err != nil {
		return fmt.Errorf("reading the kernel command line: %w", err)
	}

	if err = safe.WriterModify(ctx, r, runtimeres.NewKernelCmdline(), func(res *runtimeres.KernelCmdline) error {
		res.TypedSpec().Cmdline = strings.TrimSpace(string(b))

		return nil
	}); err != nil {
		return err
	}

	<-ctx.Done()

	return nil
}
