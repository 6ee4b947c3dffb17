// Package controlplane holds the controllers of the controlplane namespace: the configs of the
// control plane's components (API server, controller manager, scheduler, admission, audit and
// authorization) and of the bootstrap manifests, declared from the machine config's cluster
// section on control planes, and the bootstrap manifests rendered from their config.
package controlplane

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// fromClusterConfig declares one controlplane config resource from the active machine config of
// a control plane: out is made by newOut, filled by fill from the cluster section. Workers
// have none.
func fromClusterConfig[Out generic.ResourceWithRD](name string, newOut func() Out, fill func(talosconfig.ClusterConfig, Out) error) *transform.Controller[*config.MachineConfig, Out] {
	return fromConfig(name, newOut, func(c talosconfig.Config, out Out) error { return fill(c.Cluster(), out) })
}

// fromConfig is fromClusterConfig for what needs the machine's settings too.
func fromConfig[Out generic.ResourceWithRD](name string, newOut func() Out, fill func(talosconfig.Config, Out) error) *transform.Controller[*config.MachineConfig, Out] {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, Out]{
			Name: name,
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[Out] {
				if cfg.Metadata().ID() != config.ActiveID || cfg.Config().Machine() == nil || cfg.Config().Cluster() == nil ||
					!cfg.Config().Machine().Type().IsControlPlane() {
					return optional.None[Out]()
				}

				return optional.Some(newOut())
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out Out) error {
				return fill(cfg.Config(), out)
			},
		},
	)
}

func extraVolumes(in []talosconfig.VolumeMount) []k8s.ExtraVolume {
	out := make([]k8s.ExtraVolume, 0, len(in))

	for _, v := range in {
		out = append(out, k8s.ExtraVolume{Name: v.Name(), HostPath: v.HostPath(), MountPath: v.MountPath(), ReadOnly: v.ReadOnly()})
	}

	return out
}

func resources(in talosconfig.Resources) k8s.Resources {
	out := k8s.Resources{Requests: map[string]string{}, Limits: map[string]string{}}

	set := func(m map[string]string, k, v string) {
		if v != "" {
			m[k] = v
		}
	}

	set(out.Requests, "cpu", in.CPURequests())
	set(out.Requests, "memory", in.MemoryRequests())
	set(out.Limits, "cpu", in.CPULimits())
	set(out.Limits, "memory", in.MemoryLimits())

	return out
}

func cloudProvider(cluster talosconfig.ClusterConfig) string {
	if cluster.ExternalCloudProvider().Enabled() {
		return "external"
	}

	return ""
}
