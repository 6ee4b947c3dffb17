// Package kubespan holds the KubeSpan controllers (upstream's feature): every node of the cluster
// gets a WireGuard link "kubespan" with an address in the cluster's KubeSpan network, and the
// other members found through discovery as its peers; traffic between the nodes' addresses goes
// through the tunnel, encrypted.
package kubespan

import (
	"context"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"go.uber.org/zap"
)

// ConfigController declares KubeSpanConfig: the machine config's machine.network.kubespan,
// while KubeSpan is enabled; otherwise no resource.
type ConfigController = transform.Controller[*config.MachineConfig, *kubespan.Config]

// NewConfigController is a transform, as upstream's kubespan ConfigController (which, unlike
// this one, also publishes a disabled config).
func NewConfigController() *ConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *kubespan.Config]{
			Name: "kubespan.ConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*kubespan.Config] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*kubespan.Config]()
				}

				if c := cfg.Config(); c.Machine() == nil || c.Cluster() == nil || !c.Machine().Network().KubeSpan().Enabled() {
					return optional.None[*kubespan.Config]()
				}

				return optional.Some(kubespan.NewConfig(config.NamespaceName, kubespan.ConfigID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, res *kubespan.Config) error {
				c := cfg.Config()
				ks := c.Machine().Network().KubeSpan()

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
			},
		},
	)
}
