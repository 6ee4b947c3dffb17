package controlplane

import (
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// SchedulerConfigController publishes kube-scheduler's config.
type SchedulerConfigController = transform.Controller[*config.MachineConfig, *k8s.SchedulerConfig]

// NewSchedulerConfigController declares SchedulerConfig from cluster.scheduler; it is disabled
// (no static pod on this node) by machine.controlPlane.scheduler.disabled.
func NewSchedulerConfigController() *SchedulerConfigController {
	return fromConfig("controlplane.SchedulerConfigController", k8s.NewSchedulerConfig,
		func(c talosconfig.Config, out *k8s.SchedulerConfig) error {
			s := c.Cluster().Scheduler()

			*out.TypedSpec() = k8s.SchedulerConfigSpec{
				Enabled:              !c.Machine().Controlplane().Scheduler().Disabled(),
				Image:                s.Image(),
				ExtraArgs:            s.ExtraArgs(),
				ExtraVolumes:         extraVolumes(s.ExtraVolumes()),
				EnvironmentVariables: s.Env(),
				Resources:            resources(s.Resources()),
				Config:               s.Config(),
			}

			return nil
		})
}
