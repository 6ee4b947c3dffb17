package k8s

import (
	"context"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// NodeIPConfigController publishes how the node's Kubernetes IPs are chosen.
type NodeIPConfigController = transform.Controller[*config.MachineConfig, *k8s.NodeIPConfig]

// NewNodeIPConfigController declares NodeIPConfig from machine.kubelet.nodeIP.validSubnets
// (any address when unset; a "!" prefix excludes a subnet), excluding the pod and service
// subnets, as upstream.
func NewNodeIPConfigController() *NodeIPConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *k8s.NodeIPConfig]{
			Name: "k8s.NodeIPConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*k8s.NodeIPConfig] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*k8s.NodeIPConfig]()
				}

				return optional.Some(k8s.NewNodeIPConfig(k8s.NamespaceName, k8s.KubeletID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *k8s.NodeIPConfig) error {
				m, cluster := cfg.Config().Machine(), cfg.Config().Cluster()
				if m == nil || cluster == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no machine or cluster section")
				}

				spec := out.TypedSpec()
				spec.ValidSubnets = slices.Clone(m.Kubelet().NodeIP().ValidSubnets())

				if len(spec.ValidSubnets) == 0 {
					spec.ValidSubnets = []string{"0.0.0.0/0", "::/0"}
				}

				spec.ExcludeSubnets = append(slices.Clone(cluster.Network().PodCIDRs()), cluster.Network().ServiceCIDRs()...)

				return nil
			},
		},
	)
}
