package k8s

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// KubeletConfigController publishes kubelet's config from the machine config.
type KubeletConfigController = transform.Controller[*config.MachineConfig, *k8s.KubeletConfig]

// NewKubeletConfigController declares KubeletConfig on every node from machine.kubelet (image,
// extraArgs, extraMounts, extraConfig, clusterDNS) and cluster.network (DNS domain; the DNS
// service IPs when machine.kubelet.clusterDNS is unset). StaticPodListURL is where the static
// pod server (the kubelet runtime's) says it serves the static pods, once it says so.
func NewKubeletConfigController() *KubeletConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *k8s.KubeletConfig]{
			Name: "k8s.KubeletConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*k8s.KubeletConfig] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*k8s.KubeletConfig]()
				}

				return optional.Some(k8s.NewKubeletConfig(k8s.NamespaceName, k8s.KubeletID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *k8s.KubeletConfig) error {
				m, cluster := cfg.Config().Machine(), cfg.Config().Cluster()
				if m == nil || cluster == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no machine or cluster section")
				}

				kubelet := m.Kubelet()

				clusterDNS := kubelet.ClusterDNS()
				if len(clusterDNS) == 0 {
					ips, err := cluster.Network().DNSServiceIPs()
					if err != nil {
						return fmt.Errorf("cluster.network.serviceSubnets: %w", err)
					}

					for _, ip := range ips {
						clusterDNS = append(clusterDNS, ip.String())
					}
				}

				staticPodURL := ""

				status, err := safe.ReaderGetByID[*k8s.StaticPodServerStatus](ctx, r, k8s.StaticPodServerStatusResourceID)
				switch {
				case err == nil:
					staticPodURL = status.TypedSpec().URL
				case !state.IsNotFoundError(err):
					return fmt.Errorf("reading the static pod server status: %w", err)
				}

				*out.TypedSpec() = k8s.KubeletConfigSpec{
					Image:                         kubelet.Image(),
					ClusterDNS:                    clusterDNS,
					ClusterDomain:                 cluster.Network().DNSDomain(),
					ExtraArgs:                     kubelet.ExtraArgs(),
					ExtraMounts:                   kubelet.ExtraMounts(),
					ExtraConfig:                   kubelet.ExtraConfig(),
					CloudProviderExternal:         cluster.ExternalCloudProvider().Enabled(),
					DefaultRuntimeSeccompEnabled:  kubelet.DefaultRuntimeSeccompProfileEnabled(),
					SkipNodeRegistration:          kubelet.SkipNodeRegistration(),
					StaticPodListURL:              staticPodURL,
					DisableManifestsDirectory:     kubelet.DisableManifestsDirectory(),
					CredentialProviderConfig:      kubelet.CredentialProviderConfig(),
					AllowSchedulingOnControlPlane: cluster.ScheduleOnControlPlanes(),
					EnableFSQuotaMonitoring:       cfg.Config().Machine().Features().DiskQuotaSupportEnabled(),
				}

				return nil
			},
		},
		transform.WithExtraInputs(controller.Input{
			Namespace: k8s.NamespaceName, Type: k8s.StaticPodServerStatusType,
			ID: optional.Some(k8s.StaticPodServerStatusResourceID), Kind: controller.InputWeak,
		}),
	)
}
