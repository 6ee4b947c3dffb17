package controlplane

import (
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// AdmissionControlConfigController publishes the API server's admission plugins' config.
type AdmissionControlConfigController = transform.Controller[*config.MachineConfig, *k8s.AdmissionControlConfig]

// NewAdmissionControlConfigController declares AdmissionControlConfig from
// cluster.apiServer.admissionControl (gen config sets PodSecurity's defaults there).
func NewAdmissionControlConfigController() *AdmissionControlConfigController {
	return fromClusterConfig("controlplane.AdmissionControlConfigController", k8s.NewAdmissionControlConfig,
		func(cluster talosconfig.ClusterConfig, out *k8s.AdmissionControlConfig) error {
			spec := out.TypedSpec()
			spec.Config = nil

			for _, p := range cluster.APIServer().AdmissionControl() {
				spec.Config = append(spec.Config, k8s.AdmissionPluginSpec{Name: p.Name(), Configuration: p.Configuration()})
			}

			return nil
		})
}
