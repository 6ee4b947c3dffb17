package runtime

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// SBOMItemController publishes the components the node carries (SBOMItem, one per component,
// id: its name), a list the node decides at start (controllers.List): it changes only with an
// upgrade.
type SBOMItemController struct {
	Items []runtimeres.SBOMItemSpec
}

// Name implements controller.Controller.
func (ctrl *SBOMItemController) Name() string { return "runtime.SBOMItemController" }

// Inputs implements controller.Controller.
func (ctrl *SBOMItemController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *SBOMItemController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.SBOMItemType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *SBOMItemController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for _, item := range ctrl.Items {
		if err := safe.WriterModify(ctx, r, runtimeres.NewSBOMItemSpec(runtimeres.NamespaceName, item.Name), func(res *runtimeres.SBOMItem) error {
			*res.TypedSpec() = item

			return nil
		}); err != nil {
			return err
		}
	}

	<-ctx.Done()

	return nil
}
