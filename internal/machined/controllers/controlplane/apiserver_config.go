package controlplane

import (
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// LocalEtcd is where the API server finds etcd: the node's own member, as upstream.
const LocalEtcd = "https://localhost:2379"

// APIServerConfigController publishes kube-apiserver's config.
type APIServerConfigController = transform.Controller[*config.MachineConfig, *k8s.APIServerConfig]

// NewAPIServerConfigController declares APIServerConfig from cluster.apiServer, the endpoint,
// the local port and the service subnets; the API server advertises its pod's IP.
func NewAPIServerConfigController() *APIServerConfigController {
	return fromClusterConfig("controlplane.APIServerConfigController", k8s.NewAPIServerConfig,
		func(cluster talosconfig.ClusterConfig, out *k8s.APIServerConfig) error {
			api := cluster.APIServer()

			*out.TypedSpec() = k8s.APIServerConfigSpec{
				Image:                    api.Image(),
				CloudProvider:            cloudProvider(cluster),
				ControlPlaneEndpoint:     cluster.Endpoint().String(),
				EtcdServers:              []string{LocalEtcd},
				LocalPort:                cluster.LocalAPIServerPort(),
				ServiceCIDRs:             cluster.Network().ServiceCIDRs(),
				ExtraArgs:                api.ExtraArgs(),
				ExtraVolumes:             extraVolumes(api.ExtraVolumes()),
				EnvironmentVariables:     api.Env(),
				PodSecurityPolicyEnabled: !api.DisablePodSecurityPolicy(),
				AdvertisedAddress:        "$(POD_IP)",
				Resources:                resources(api.Resources()),
			}

			return nil
		})
}
