package controlplane

import (
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// AuthorizationConfigController publishes the API server's authorization config.
type AuthorizationConfigController = transform.Controller[*config.MachineConfig, *k8s.AuthorizationConfig]

// NewAuthorizationConfigController declares AuthorizationConfig as upstream 1.11: the Node and
// RBAC authorizers first, then cluster.apiServer.authorizationConfig's.
func NewAuthorizationConfigController() *AuthorizationConfigController {
	return fromClusterConfig("controlplane.AuthorizationConfigController", k8s.NewAuthorizationConfig,
		func(cluster talosconfig.ClusterConfig, out *k8s.AuthorizationConfig) error {
			spec := out.TypedSpec()
			spec.Image = cluster.APIServer().Image()
			spec.Config = []k8s.AuthorizationAuthorizersSpec{{Type: "Node", Name: "node"}, {Type: "RBAC", Name: "rbac"}}

			for _, a := range cluster.APIServer().AuthorizationConfig() {
				if a.Type() == "Node" || a.Type() == "RBAC" {
					continue // already there, once
				}

				spec.Config = append(spec.Config, k8s.AuthorizationAuthorizersSpec{Type: a.Type(), Name: a.Name(), Webhook: a.Webhook()})
			}

			return nil
		})
}
