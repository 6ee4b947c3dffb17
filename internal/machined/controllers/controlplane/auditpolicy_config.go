package controlplane

import (
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// AuditPolicyConfigController publishes the API server's audit policy.
type AuditPolicyConfigController = transform.Controller[*config.MachineConfig, *k8s.AuditPolicyConfig]

// NewAuditPolicyConfigController declares AuditPolicyConfig from cluster.apiServer.auditPolicy
// (the machinery module supplies upstream's default policy when the config sets none).
func NewAuditPolicyConfigController() *AuditPolicyConfigController {
	return fromClusterConfig("controlplane.AuditPolicyConfigController", k8s.NewAuditPolicyConfig,
		func(cluster talosconfig.ClusterConfig, out *k8s.AuditPolicyConfig) error {
			out.TypedSpec().Config = cluster.APIServer().AuditPolicy()

			return nil
		})
}
