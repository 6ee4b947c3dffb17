package controlplane

import (
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// ControllerManagerConfigController publishes kube-controller-manager's config.
type ControllerManagerConfigController = transform.Controller[*config.MachineConfig, *k8s.ControllerManagerConfig]

// NewControllerManagerConfigController declares ControllerManagerConfig from
// cluster.controllerManager and the pod and service subnets.
func NewControllerManagerConfigController() *ControllerManagerConfigController {
	return fromClusterConfig("controlplane.ControllerManagerConfigController", k8s.NewControllerManagerConfig,
		func(cluster talosconfig.ClusterConfig, out *k8s.ControllerManagerConfig) error {
			cm := cluster.ControllerManager()

			*out.TypedSpec() = k8s.ControllerManagerConfigSpec{
				Enabled:              true,
				Image:                cm.Image(),
				CloudProvider:        cloudProvider(cluster),
				PodCIDRs:             cluster.Network().PodCIDRs(),
				ServiceCIDRs:         cluster.Network().ServiceCIDRs(),
				ExtraArgs:            cm.ExtraArgs(),
				ExtraVolumes:         extraVolumes(cm.ExtraVolumes()),
				EnvironmentVariables: cm.Env(),
				Resources:            resources(cm.Resources()),
			}

			return nil
		})
}
