// Package kubespan holds the KubeSpan controllers (upstream's feature): every node of the cluster
// gets a WireGuard link "kubespan" with an address in the cluster's KubeSpan network, and the
// other members found through discovery as its peers; traffic between the nodes' addresses goes
// through the tunnel, encrypted.
package kubespan

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"go.uber.org/zap"
)

// ConfigController publishes KubeSpanConfig from the machine config's
// machine.network.kubespan, while KubeSpan is enabled.
type ConfigController struct{}

// Name implements controller.Controller.
func (ctrl *ConfigController) Name() string { return "kubespan.ConfigController" }

// Inputs implements controller.Controller.
func (ctrl *ConfigController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *ConfigController) Outputs() []controller.Output {
	return []controller.Output{{Type: kubespan.ConfigType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *ConfigController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil && !state.IsNotFoundError(err) {
			return err
		}

		r.StartTrackingOutputs()

		if cfg != nil {
			if c := cfg.Config(); c.Machine() != nil && c.Cluster() != nil && c.Machine().Network().KubeSpan().Enabled() {
				ks := c.Machine().Network().KubeSpan()
				if err = safe.WriterModify(ctx, r, kubespan.NewConfig(config.NamespaceName, kubespan.ConfigID), func(res *kubespan.Config) error {
					spec := res.TypedSpec()
					spec.Enabled = true
					spec.ClusterID = c.Cluster().ID()
					spec.SharedSecret = c.Cluster().Secret()
					spec.ForceRouting = ks.ForceRouting()
					spec.AdvertiseKubernetesNetworks = ks.AdvertiseKubernetesNetworks()
					spec.MTU = ks.MTU()
					spec.HarvestExtraEndpoints = ks.HarvestExtraEndpoints()
					spec.EndpointFilters = ks.Filters().Endpoints()
					spec.ExtraEndpoints = nil

					if kc := c.KubespanConfig(); kc != nil {
						spec.ExtraEndpoints = append([]netip.AddrPort(nil), kc.ExtraAnnouncedEndpoints()...)
					}

					return nil
				}); err != nil {
					return fmt.Errorf("writing the KubeSpan config: %w", err)
				}
			}
		}

		if err = safe.CleanupOutputs[*kubespan.Config](ctx, r); err != nil {
			return err
		}
	}
}
