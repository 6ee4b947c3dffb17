package kubespan

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"go.uber.org/zap"
)

// EndpointController publishes, with machine.network.kubespan.harvestExtraEndpoints, the
// endpoint each KubeSpan peer that is up was reached at (Endpoint, by public key, with the
// peer's affiliate ID): the discovery service adds them to those nodes' own, so the others try
// what worked (an address behind NAT, say).
type EndpointController struct{}

// Name implements controller.Controller.
func (ctrl *EndpointController) Name() string { return "kubespan.EndpointController" }

// Inputs implements controller.Controller.
func (ctrl *EndpointController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: kubespan.ConfigType, ID: optional.Some(kubespan.ConfigID), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.PeerStatusType, Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.AffiliateType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *EndpointController) Outputs() []controller.Output {
	return []controller.Output{{Type: kubespan.EndpointType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *EndpointController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		harvested, err := ctrl.harvest(ctx, r)
		if err != nil {
			return err
		}

		r.StartTrackingOutputs()

		for key, spec := range harvested {
			if err = safe.WriterModify(ctx, r, kubespan.NewEndpoint(kubespan.NamespaceName, key), func(res *kubespan.Endpoint) error {
				*res.TypedSpec() = spec

				return nil
			}); err != nil {
				return fmt.Errorf("writing KubeSpan endpoint of %s: %w", spec.AffiliateID, err)
			}
		}

		if err = safe.CleanupOutputs[*kubespan.Endpoint](ctx, r); err != nil {
			return err
		}
	}
}

// harvest is the endpoint of each peer that is up, by public key, when the config asks for it.
func (ctrl *EndpointController) harvest(ctx context.Context, r controller.Reader) (map[string]kubespan.EndpointSpec, error) {
	cfg, err := safe.ReaderGetByID[*kubespan.Config](ctx, r, kubespan.ConfigID)
	if state.IsNotFoundError(err) || (err == nil && !cfg.TypedSpec().HarvestExtraEndpoints) {
		return nil, nil
	}

	if err != nil {
		return nil, err
	}

	affiliates, err := safe.ReaderListAll[*cluster.Affiliate](ctx, r)
	if err != nil {
		return nil, err
	}

	byKey := map[string]string{}

	for a := range affiliates.All() {
		if key := a.TypedSpec().KubeSpan.PublicKey; key != "" {
			byKey[key] = a.TypedSpec().NodeID
		}
	}

	statuses, err := safe.ReaderListAll[*kubespan.PeerStatus](ctx, r)
	if err != nil {
		return nil, err
	}

	out := map[string]kubespan.EndpointSpec{}

	for st := range statuses.All() {
		s, id := st.TypedSpec(), byKey[st.Metadata().ID()]
		if s.State == kubespan.PeerStateUp && s.Endpoint.IsValid() && id != "" {
			out[st.Metadata().ID()] = kubespan.EndpointSpec{AffiliateID: id, Endpoint: s.Endpoint}
		}
	}

	return out, nil
}
