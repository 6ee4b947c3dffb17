package cluster_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// TestDiscoveryConfig: the service endpoint URL becomes host:port (the scheme's port when none
// is given; http without TLS), with the cluster's ID and its secret as the key; discovery or
// the service registry off leaves the service settings empty; a bad URL or secret names the
// field.
func TestDiscoveryConfig(t *testing.T) {
	key := []byte(strings.Repeat("s", 32))

	for _, tc := range []struct {
		name, endpoint, secret string
		enabled, service       bool
		want                   cluster.ConfigSpec
		wantErr                string
	}{
		{name: "https default port", endpoint: "https://discovery.example/", enabled: true, service: true,
			want: cluster.ConfigSpec{DiscoveryEnabled: true, RegistryServiceEnabled: true, ServiceEndpoint: "discovery.example:443", ServiceEncryptionKey: key, ServiceClusterID: "id"}},
		{name: "http default port is insecure", endpoint: "http://10.5.0.1/", enabled: true, service: true,
			want: cluster.ConfigSpec{DiscoveryEnabled: true, RegistryServiceEnabled: true, ServiceEndpoint: "10.5.0.1:80", ServiceEndpointInsecure: true, ServiceEncryptionKey: key, ServiceClusterID: "id"}},
		{name: "explicit port, IPv6", endpoint: "https://[fd00::1]:3000", enabled: true, service: true,
			want: cluster.ConfigSpec{DiscoveryEnabled: true, RegistryServiceEnabled: true, ServiceEndpoint: "[fd00::1]:3000", ServiceEncryptionKey: key, ServiceClusterID: "id"}},
		{name: "service registry off", endpoint: "https://discovery.example/", enabled: true,
			want: cluster.ConfigSpec{DiscoveryEnabled: true}},
		{name: "discovery off", endpoint: "https://discovery.example/", service: true},
		{name: "not a URL", endpoint: "discovery.example:443", enabled: true, service: true, wantErr: "cluster.discovery.registries.service.endpoint"},
		{name: "secret not base64", endpoint: "https://discovery.example/", secret: "not base64!", enabled: true, service: true, wantErr: "cluster.secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret := tc.secret
			if secret == "" {
				secret = base64.StdEncoding.EncodeToString(key)
			}

			cfg := ctest.MachineConfig(t, machine.TypeWorker, discovery(tc.enabled, tc.service, tc.endpoint), func(c *v1alpha1.Config) {
				c.ClusterConfig.ClusterID, c.ClusterConfig.ClusterSecret = "id", secret
			})

			got, err := clusterctrl.DiscoveryConfig(cfg.Config().Cluster())
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.NotContains(t, err.Error(), secret)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
