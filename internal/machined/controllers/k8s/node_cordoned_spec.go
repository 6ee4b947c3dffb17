package k8s

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// NodeCordonedSpecController says, as upstream's, when Talos wants its Node cordoned: while the
// node shuts down, upgrades or resets (the stages that drain it), NodeCordonedSpec exists;
// once it boots or runs again, it is gone and NodeApplyController may uncordon the Node (only
// a Node Talos cordoned itself). Other stages (a reboot: Talos does not drain for one) leave
// it as it is.
type NodeCordonedSpecController struct{}

// Name implements controller.Controller.
func (ctrl *NodeCordonedSpecController) Name() string { return "k8s.NodeCordonedSpecController" }

// Inputs implements controller.Controller.
func (ctrl *NodeCordonedSpecController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: runtimeres.NamespaceName, Type: runtimeres.MachineStatusType, ID: optional.Some(runtimeres.MachineStatusID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *NodeCordonedSpecController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.NodeCordonedSpecType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *NodeCordonedSpecController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		status, err := safe.ReaderGetByID[*runtimeres.MachineStatus](ctx, r, runtimeres.MachineStatusID)
		if state.IsNotFoundError(err) {
			continue
		} else if err != nil {
			return err
		}

		switch status.TypedSpec().Stage { //nolint:exhaustive // the others keep the spec as it is
		case runtimeres.MachineStageShuttingDown, runtimeres.MachineStageUpgrading, runtimeres.MachineStageResetting:
			if err = safe.WriterModify(ctx, r, k8s.NewNodeCordonedSpec(k8s.NodeCordonedID), func(*k8s.NodeCordonedSpec) error { return nil }); err != nil {
				return err
			}
		case runtimeres.MachineStageBooting, runtimeres.MachineStageRunning:
			if err = r.Destroy(ctx, k8s.NewNodeCordonedSpec(k8s.NodeCordonedID).Metadata()); err != nil && !state.IsNotFoundError(err) {
				return err
			}
		}
	}
}
