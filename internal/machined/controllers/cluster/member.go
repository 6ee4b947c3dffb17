package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"go.uber.org/zap"
)

// MemberController publishes the cluster's Members: each affiliate (namespace cluster, this
// node's and the merged ones of the registries) that has a Kubernetes node name, by that name,
// as upstream's. An affiliate without one is a KubeSpan peer only.
type MemberController struct{}

// Name implements controller.Controller.
func (ctrl *MemberController) Name() string { return "cluster.MemberController" }

// Inputs implements controller.Controller.
func (ctrl *MemberController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: cluster.NamespaceName, Type: cluster.AffiliateType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *MemberController) Outputs() []controller.Output {
	return []controller.Output{{Type: cluster.MemberType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MemberController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		affiliates, err := safe.ReaderListAll[*cluster.Affiliate](ctx, r)
		if err != nil {
			return fmt.Errorf("listing affiliates: %w", err)
		}

		r.StartTrackingOutputs()

		for a := range affiliates.All() {
			spec := a.TypedSpec()
			if spec.Nodename == "" {
				continue
			}

			if err = safe.WriterModify(ctx, r, cluster.NewMember(cluster.NamespaceName, spec.Nodename), func(res *cluster.Member) error {
				m := res.TypedSpec()
				m.NodeID, m.Hostname, m.MachineType, m.OperatingSystem = spec.NodeID, spec.Hostname, spec.MachineType, spec.OperatingSystem
				m.Addresses = slices.Clone(spec.Addresses)
				m.ControlPlane = nil

				if spec.ControlPlane != nil {
					m.ControlPlane = &cluster.ControlPlane{APIServerPort: spec.ControlPlane.APIServerPort}
				}

				return nil
			}); err != nil {
				return fmt.Errorf("writing member %s: %w", spec.Nodename, err)
			}
		}

		if err = safe.CleanupOutputs[*cluster.Member](ctx, r); err != nil {
			return fmt.Errorf("removing departed members: %w", err)
		}
	}
}
