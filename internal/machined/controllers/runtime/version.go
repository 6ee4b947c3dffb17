package runtime

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/version"
)

// VersionController publishes the node's version (Version, `talosctl get version`): the tag
// this machined was built with, which changes only with an upgrade (a new process).
type VersionController struct{}

// Name implements controller.Controller.
func (ctrl *VersionController) Name() string { return "runtime.VersionController" }

// Inputs implements controller.Controller.
func (ctrl *VersionController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *VersionController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.VersionType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *VersionController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	if err := safe.WriterModify(ctx, r, runtimeres.NewVersion(), func(res *runtimeres.Version) error {
		res.TypedSpec().Version = version.Tag

		return nil
	}); err != nil {
		return err
	}

	<-ctx.Done()

	return nil
}
