package runtime

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// PlatformMetadataController publishes PlatformMetadata: what the platform the node booted on
// said of it (internal/platform: the boot reads it once, and it does not change until the next
// boot).
type PlatformMetadataController struct {
	Spec runtimeres.PlatformMetadataSpec
}

// Name implements controller.Controller.
func (ctrl *PlatformMetadataController) Name() string { return "runtime.PlatformMetadataController" }

// Inputs implements controller.Controller.
func (ctrl *PlatformMetadataController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *PlatformMetadataController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.PlatformMetadataType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *PlatformMetadataController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	if err := safe.WriterModify(ctx, r, runtimeres.NewPlatformMetadataSpec(runtimeres.NamespaceName, runtimeres.PlatformMetadataID),
		func(res *runtimeres.PlatformMetadata) error {
			*res.TypedSpec() = ctrl.Spec

			return nil
		}); err != nil {
		return err
	}

	<-ctx.Done()

	return nil
}
