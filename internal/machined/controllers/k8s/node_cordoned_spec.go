package k8s

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// NodeCordonedSpecController says, as upstream's, when Talos wants its Node cordoned: while the
// node shuts down, upgrades or resets (the stages that drain it), NodeCordonedSpec exists;
// once it boots or runs again, it is gone and NodeApplyController may uncordon the Node (only
// a Node Talos cordoned itself). Other stages (a reboot: Talos does not drain for one) leave
// it as it is.
type NodeCordonedSpecController = transform.Controller[*runtimeres.MachineStatus, *k8s.NodeCordonedSpec]

// NewNodeCordonedSpecController declares NodeCordonedSpec from MachineStatus's stage.
func NewNodeCordonedSpecController() *NodeCordonedSpecController {
	return transform.NewController(
		transform.Settings[*runtimeres.MachineStatus, *k8s.NodeCordonedSpec]{
			Name: "k8s.NodeCordonedSpecController",
			MapMetadataOptionalFunc: func(status *runtimeres.MachineStatus) optional.Optional[*k8s.NodeCordonedSpec] {
				switch status.TypedSpec().Stage { //nolint:exhaustive // the others are TransformFunc's
				case runtimeres.MachineStageBooting, runtimeres.MachineStageRunning:
					return optional.None[*k8s.NodeCordonedSpec]() // cleaned up
				}

				return optional.Some(k8s.NewNodeCordonedSpec(k8s.NodeCordonedID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, status *runtimeres.MachineStatus, _ *k8s.NodeCordonedSpec) error {
				switch stage := status.TypedSpec().Stage; stage { //nolint:exhaustive // the others keep the spec as it is
				case runtimeres.MachineStageShuttingDown, runtimeres.MachineStageUpgrading, runtimeres.MachineStageResetting:
					return nil
				default:
					// Kept if it exists (the output counts as touched), not created if not.
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("stage %s keeps the wish as it is", stage)
				}
			},
		},
	)
}
