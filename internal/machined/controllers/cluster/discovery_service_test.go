package cluster_test

import (
	"encoding/base64"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/rtestutils"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"

	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/testenv"
)

// TestDiscoveryService: the nodes of one cluster find each other through a real discovery
// service (members, raw and merged affiliates, KubeSpan data with the address the service saw,
// and harvested endpoints); a node of another cluster, or of this cluster's ID with another
// key, sees none of them and is seen by none; discovery turned off, or a reset, withdraws a
// node from the others' lists.
func TestDiscoveryService(t *testing.T) {
	endpoint := testenv.StartDiscovery(t)
	cpAddr, wAddr := testAddr(11), testAddr(12)

	cpCfg := ctest.MachineConfig(t, machine.TypeControlPlane, discovery(true, true, endpoint))
	cp := startNode(t)
	// Its flannel and CNI bridge addresses (pod subnet) are not given to the others.
	cp.Create(append(node("cp1", cpAddr, "10.244.0.0", "10.244.0.1"), cpCfg)...)

	// The control plane runs KubeSpan: its affiliate carries its key and WireGuard endpoints,
	// never its KubeSpan address as an endpoint or a node address; with
	// advertiseKubernetesNetworks, its pod networks.
	ks := kubespan.NewIdentity(kubespan.NamespaceName, kubespan.LocalIdentity)
	ks.TypedSpec().PublicKey, ks.TypedSpec().Subnet, ks.TypedSpec().Address = "cp-key", netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("fd00::1/128")
	ksCfg := kubespan.NewConfig(config.NamespaceName, kubespan.ConfigID)
	ksCfg.TypedSpec().Enabled, ksCfg.TypedSpec().AdvertiseKubernetesNetworks = true, true
	cp.Create(ks, ksCfg)

	w := startNode(t)
	w.Create(append(node("w1", wAddr), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint)))...)

	cpID, wID := localID(cp), localID(w)

	// Another cluster on the same service, and a node with this cluster's ID but another key.
	other := startNode(t)
	other.Create(append(node("other1", testAddr(13)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint), func(c *v1alpha1.Config) {
		c.ClusterConfig.ClusterID = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("o", 32)))
	}))...)

	wrongKey := startNode(t)
	wrongKey.Create(append(node("thief1", testAddr(14)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint), func(c *v1alpha1.Config) {
		c.ClusterConfig.ClusterSecret = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	}))...)

	ctest.AssertResource(w, "cp1", func(r *cluster.Member, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal(cpID, spec.NodeID)
		a.Equal(machine.TypeControlPlane, spec.MachineType)
		a.Equal([]netip.Addr{netip.MustParseAddr(cpAddr)}, spec.Addresses)
		a.Contains(spec.OperatingSystem, "(")

		if a.NotNil(spec.ControlPlane) {
			a.Equal(constants.DefaultControlPlanePort, spec.ControlPlane.APIServerPort)
		}
	})

	ctest.AssertResource(cp, "w1", func(r *cluster.Member, a *assert.Assertions) {
		a.Equal(wID, r.TypedSpec().NodeID)
		a.Equal(machine.TypeWorker, r.TypedSpec().MachineType)
		a.Equal([]netip.Addr{netip.MustParseAddr(wAddr)}, r.TypedSpec().Addresses)
		a.Nil(r.TypedSpec().ControlPlane)
	})

	ctest.AssertIDs[*cluster.Member](cp, "cp1", "w1")
	ctest.AssertIDs[*cluster.Member](w, "cp1", "w1")
	ctest.AssertIDs[*cluster.Affiliate](w, slices.Sorted(slices.Values([]string{cpID, wID}))...)

	// The service tells each node the address it came from (here loopback), which KubeSpan
	// announces as an endpoint too (a node behind NAT).
	ctest.AssertResource(cp, clusterctrl.PublicAddressID, func(r *network.AddressStatus, a *assert.Assertions) {
		a.Equal(netip.MustParsePrefix("127.0.0.1/32"), r.TypedSpec().Address)
	}, rtestutils.WithNamespace(cluster.NamespaceName))

	// The worker's raw affiliate of the control plane is the service's, by node ID, with the
	// KubeSpan data it was sent.
	ctest.AssertResource(w, clusterctrl.ServicePrefix+cpID, func(r *cluster.Affiliate, a *assert.Assertions) {
		k := r.TypedSpec().KubeSpan
		a.Equal("cp-key", k.PublicKey)
		a.Equal(netip.MustParseAddr("fd00::1"), k.Address)
		a.ElementsMatch([]netip.AddrPort{
			netip.AddrPortFrom(netip.MustParseAddr(cpAddr), constants.KubeSpanDefaultPort), netip.MustParseAddrPort("127.0.0.1:51820"),
		}, k.Endpoints)
		a.Equal([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/32"), netip.MustParsePrefix("10.244.0.1/32")}, k.AdditionalAddresses)
	}, rawNamespace())

	// harvestExtraEndpoints: the worker's KubeSpan is up with the control plane at an endpoint
	// the control plane did not announce; the service gives it to everyone (but the control
	// plane itself, whose client skips its own entry) as one of its.
	harvested := kubespan.NewEndpoint(kubespan.NamespaceName, "cp-key")
	harvested.TypedSpec().AffiliateID, harvested.TypedSpec().Endpoint = cpID, netip.MustParseAddrPort("192.0.2.7:40000")
	w.Create(harvested)

	want := []netip.AddrPort{
		netip.MustParseAddrPort(net.JoinHostPort(cpAddr, "51820")), netip.MustParseAddrPort("127.0.0.1:51820"), netip.MustParseAddrPort("192.0.2.7:40000"),
	}

	ctest.AssertResource(w, cpID, func(r *cluster.Affiliate, a *assert.Assertions) {
		a.ElementsMatch(want, r.TypedSpec().KubeSpan.Endpoints)
	})

	// Neither the other cluster nor the wrong key sees anyone, or is seen.
	ctest.AssertIDs[*cluster.Member](other, "other1")
	ctest.AssertIDs[*cluster.Member](wrongKey, "thief1")
	ctest.AssertIDs[*cluster.Affiliate](wrongKey, localID(wrongKey))
	ctest.AssertIDs[*cluster.Member](cp, "cp1", "w1")

	// Discovery off on the worker: it lists nobody, and the service forgets it.
	w.Put(ctest.MachineConfig(t, machine.TypeWorker, discovery(false, true, endpoint)))
	ctest.AssertIDs[*cluster.Member](w)
	ctest.AssertIDs[*cluster.Member](cp, "cp1")
	ctest.AssertNoResource[*cluster.Affiliate](cp, clusterctrl.ServicePrefix+wID, rawNamespace())

	// On again: back in both lists.
	w.Put(ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint)))
	ctest.AssertIDs[*cluster.Member](w, "cp1", "w1")
	ctest.AssertIDs[*cluster.Member](cp, "cp1", "w1")

	// A node being reset withdraws itself; a reset that fails (running again) comes back.
	status := runtimeres.NewMachineStatus()
	status.TypedSpec().Stage = runtimeres.MachineStageResetting
	w.Create(status)
	ctest.AssertIDs[*cluster.Member](cp, "cp1")

	ctest.Update(w, status, func(r *runtimeres.MachineStatus) error {
		r.TypedSpec().Stage = runtimeres.MachineStageRunning

		return nil
	})
	ctest.AssertIDs[*cluster.Member](cp, "cp1", "w1")
}
