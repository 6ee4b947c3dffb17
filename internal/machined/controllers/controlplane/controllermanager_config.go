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
// cluster.controllerManager and the pod and service subnets; it is disabled (no static pod on
// this node) by machine.controlPlane.controllerManager.disabled.
func NewControllerManagerConfigController() *ControllerManagerConfigController {
	return fromConfig("controlplane.ControllerManagerConfigController", k8s.NewControllerManagerConfig,
		func(c talosconfig.Config, out *k8s.ControllerManagerConfig) error {
			cluster := c.Cluster()
			cm := cluster.ControllerManager()

			*out.TypedSpec() = k8s.ControllerManagerConfigSpec{
				Enabled:              !c.Machine().Controlplane().ControllerManager().Disabled(),
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
