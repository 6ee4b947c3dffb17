package cluster

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"go.uber.org/zap"
)

// AffiliateMergeController merges the raw affiliates of every registry (cluster-raw:
// service/<node ID> from the discovery service, k8s/<node ID> from the Kubernetes registry)
// into one Affiliate per node ID in namespace cluster, as upstream's: the addresses and
// KubeSpan endpoints of all, the other fields of the last registry (by ID) that has them.
type AffiliateMergeController struct{}

// Name implements controller.Controller.
func (ctrl *AffiliateMergeController) Name() string { return "cluster.AffiliateMergeController" }

// Inputs implements controller.Controller.
func (ctrl *AffiliateMergeController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: cluster.RawNamespaceName, Type: cluster.AffiliateType, Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.IdentityType, ID: optional.Some(cluster.LocalIdentity), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *AffiliateMergeController) Outputs() []controller.Output {
	// Shared: the local affiliate is the LocalAffiliateController's.
	return []controller.Output{{Type: cluster.AffiliateType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *AffiliateMergeController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		identity, err := readOptional[*cluster.Identity](ctx, r, cluster.LocalIdentity)
		if err != nil {
			return err
		}

		raw, err := safe.ReaderList[*cluster.Affiliate](ctx, r, resource.NewMetadata(cluster.RawNamespaceName, cluster.AffiliateType, "", resource.VersionUndefined))
		if err != nil {
			return fmt.Errorf("listing raw affiliates: %w", err)
		}

		merged := map[string]*cluster.AffiliateSpec{}

		var order []string

		for a := range raw.All() {
			spec := a.TypedSpec()

			// The local affiliate is this node's own word; a registry's echo of it (or another
			// node claiming its ID) is not merged into it.
			if spec.NodeID == "" || (identity != nil && spec.NodeID == identity.TypedSpec().NodeID) {
				continue
			}

			if m, ok := merged[spec.NodeID]; ok {
				m.Merge(spec)

				continue
			}

			copied := spec.DeepCopy()
			merged[spec.NodeID] = &copied
			order = append(order, spec.NodeID)
		}

		r.StartTrackingOutputs()

		for _, id := range order {
			if err = safe.WriterModify(ctx, r, cluster.NewAffiliate(cluster.NamespaceName, id), func(res *cluster.Affiliate) error {
				*res.TypedSpec() = *merged[id]

				return nil
			}); err != nil {
				return fmt.Errorf("writing affiliate %s: %w", id, err)
			}
		}

		if err = safe.CleanupOutputs[*cluster.Affiliate](ctx, r); err != nil {
			return err
		}
	}
}
