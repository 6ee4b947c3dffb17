package cluster

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"
)

// ConfigController publishes the discovery settings (cluster.Config) of the active machine
// config's cluster section.
type ConfigController = transform.Controller[*config.MachineConfig, *cluster.Config]

// NewConfigController declares cluster.Config as upstream's: a transform of the machine config.
func NewConfigController() *ConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *cluster.Config]{
			Name: "cluster.ConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*cluster.Config] {
				if cfg.Metadata().ID() != config.ActiveID || cfg.Config().Cluster() == nil {
					return optional.None[*cluster.Config]()
				}

				return optional.Some(cluster.NewConfig(config.NamespaceName, cluster.ConfigID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, res *cluster.Config) error {
				spec, err := DiscoveryConfig(cfg.Config().Cluster())
				if err != nil {
					return err
				}

				*res.TypedSpec() = spec

				return nil
			},
		},
	)
}

// DiscoveryConfig is the discovery settings of a cluster section: the registries that are on,
// and for the service registry its endpoint as host:port (the URL's port, else 80 for http,
// which is then spoken without TLS, and 443 for anything else), the cluster's id and the key
// that encrypts the affiliates (cluster.secret).
func DiscoveryConfig(c talosconfig.ClusterConfig) (cluster.ConfigSpec, error) {
	d := c.Discovery()
	if !d.Enabled() {
		return cluster.ConfigSpec{}, nil
	}

	spec := cluster.ConfigSpec{
		DiscoveryEnabled:          true,
		RegistryKubernetesEnabled: d.Registries().Kubernetes().Enabled(),
		RegistryServiceEnabled:    d.Registries().Service().Enabled(),
	}

	if !spec.RegistryServiceEnabled {
		return spec, nil
	}

	u, err := url.ParseRequestURI(d.Registries().Service().Endpoint())
	if err != nil || u.Hostname() == "" {
		return spec, fmt.Errorf("cluster.discovery.registries.service.endpoint %q is not a URL: give it as https://host[:port]/", d.Registries().Service().Endpoint())
	}

	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}

	spec.ServiceEndpoint = net.JoinHostPort(u.Hostname(), port)
	spec.ServiceEndpointInsecure = u.Scheme == "http"
	spec.ServiceClusterID = c.ID()

	if spec.ServiceEncryptionKey, err = base64.StdEncoding.DecodeString(c.Secret()); err != nil {
		return spec, fmt.Errorf("cluster.secret is not base64 (%w): generate a cluster's secrets with talosctl gen secrets", err)
	}

	return spec, nil
}
