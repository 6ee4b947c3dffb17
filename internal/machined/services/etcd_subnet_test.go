package services

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system/logging"
)

// TestEtcdSubnetFromConfig: cluster.etcd.subnet is upstream's deprecated form of
// advertisedSubnets: alone it chooses the advertised (and, listenSubnets unset, listened)
// address among the node's routed ones; advertisedSubnets, when set, wins over it.
func TestEtcdSubnetFromConfig(t *testing.T) {
	ctx := context.Background()

	st, err := resources.NewState(ctx)
	require.NoError(t, err)

	typ := configres.NewMachineType()
	typ.SetMachineType(machine.TypeControlPlane)
	require.NoError(t, st.Create(ctx, typ))

	routed := network.NewNodeAddress(network.NamespaceName, network.NodeAddressRoutedID)
	routed.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.5.0.3/24"), netip.MustParsePrefix("192.168.7.3/24")}
	require.NoError(t, st.Create(ctx, routed))

	root := t.TempDir()
	// EtcdOptions only looks the binary up; a file named etcd next to machined is enough.
	require.NoError(t, os.WriteFile(filepath.Join(root, "etcd"), nil, 0o755))

	logs, err := logging.NewManager(filepath.Join(root, "logs"))
	require.NoError(t, err)

	r := &runtime.Runtime{
		Mode: runtime.Mode{Kind: runtime.Process}, Address: "10.5.0.3", Paths: runtime.Paths{Root: root},
		Binary: filepath.Join(root, "machined"), State: st, Logs: logs,
	}

	for _, tc := range []struct {
		name       string
		subnet     string
		advertised []string
		want       netip.Addr
	}{
		{"subnet alone", "192.168.7.0/24", nil, netip.MustParseAddr("192.168.7.3")},
		{"advertisedSubnets wins", "192.168.7.0/24", []string{"10.5.0.0/24"}, netip.MustParseAddr("10.5.0.3")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.SetConfig(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
				c.ClusterConfig.EtcdConfig.EtcdSubnet = tc.subnet //nolint:staticcheck // the deprecated field is the one under test
				c.ClusterConfig.EtcdConfig.EtcdAdvertisedSubnets = tc.advertised
			}).Provider())

			o, err := EtcdOptions(r)
			require.NoError(t, err)

			ep, err := etcd.SelectEndpoints(etcd.EndpointsInput{
				Address: netip.MustParseAddr(o.Address), Addresses: o.Addresses,
				AdvertisedSubnets: o.AdvertisedSubnets, ListenSubnets: o.ListenSubnets, Exclude: o.ExcludeSubnets,
			})
			require.NoError(t, err)
			assert.Equal(t, []netip.Addr{tc.want}, ep.Advertise)
			assert.Equal(t, []netip.Addr{tc.want}, ep.ListenPeer)
		})
	}
}
