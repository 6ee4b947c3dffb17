package cluster_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

// testAddr is a loopback address of this test binary (127.82/16 is the cluster tests').
func testAddr(host int) string {
	return fmt.Sprintf("127.82.%d.%d", os.Getpid()%250+1, host)
}

// nowhere is a discovery service endpoint where nothing listens: the node's client retries in
// vain, and the node lists only itself.
const nowhere = "http://127.0.0.1:1/"

// node is what the network controllers publish about a node: its hostname and addresses.
func node(hostname, addr string, more ...string) []resource.Resource {
	status := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	status.TypedSpec().Hostname = hostname

	out := []resource.Resource{status}

	for _, id := range []resource.ID{network.NodeAddressCurrentID, network.NodeAddressAccumulativeID} {
		res := network.NewNodeAddress(network.NamespaceName, id)
		for _, a := range append([]string{addr}, more...) {
			res.TypedSpec().Addresses = append(res.TypedSpec().Addresses, netip.PrefixFrom(netip.MustParseAddr(a), 32))
		}

		out = append(out, res)
	}

	return out
}

// discovery sets cluster.discovery: on or off, and the service registry on (at endpoint) or
// off; the Kubernetes registry is off.
func discovery(enabled, service bool, endpoint string) func(*v1alpha1.Config) {
	return func(c *v1alpha1.Config) {
		c.ClusterConfig.ClusterDiscoveryConfig = &v1alpha1.ClusterDiscoveryConfig{
			DiscoveryEnabled: new(enabled),
			DiscoveryRegistries: v1alpha1.DiscoveryRegistriesConfig{
				RegistryKubernetes: v1alpha1.RegistryKubernetesConfig{RegistryDisabled: new(true)},
				RegistryService:    v1alpha1.RegistryServiceConfig{RegistryDisabled: new(!service), RegistryEndpoint: endpoint},
			},
		}
	}
}

// startNode runs a node's discovery controllers on its own state.
func startNode(t *testing.T) *ctest.Env {
	t.Helper()

	return startNodeWith(t, &clusterctrl.DiscoveryServiceController{})
}

// startNodeWith runs a node's discovery controllers with this discovery service controller.
func startNodeWith(t *testing.T, service *clusterctrl.DiscoveryServiceController) *ctest.Env {
	t.Helper()

	return ctest.Start(t,
		configctrl.NewMachineTypeController(),
		k8sctrl.NewNodenameController(),
		controlplane.NewAPIServerConfigController(),
		clusterctrl.NewConfigController(),
		&clusterctrl.IdentityController{StateDir: t.TempDir()},
		&clusterctrl.LocalAffiliateController{},
		service,
		&clusterctrl.AffiliateMergeController{},
		&clusterctrl.MemberController{},
	)
}

// localID is the node's ID, once its identity controller made it.
func localID(env *ctest.Env) string {
	var id string

	ctest.AssertResource(env, cluster.LocalIdentity, func(r *cluster.Identity, _ *assert.Assertions) { id = r.TypedSpec().NodeID })

	return id
}

// TestMembersWithoutRegistry: with no discovery service answering, a node still lists itself,
// and its entry follows its hostname.
func TestMembersWithoutRegistry(t *testing.T) {
	env := startNode(t)
	env.Create(append(node("old", testAddr(2)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, nowhere)))...)

	ctest.AssertResource(env, "old", func(r *cluster.Member, a *assert.Assertions) {
		a.Equal(machine.TypeWorker, r.TypedSpec().MachineType)
		a.Nil(r.TypedSpec().ControlPlane)
	})

	ctest.Update(env, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname = "new"

		return nil
	})

	ctest.AssertResource(env, "new", func(r *cluster.Member, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr(testAddr(2))}, r.TypedSpec().Addresses)
	})
	ctest.AssertNoResource[*cluster.Member](env, "old")
}

// TestMembersDiscoveryDisabled: cluster.discovery.enabled false (or its service registry
// disabled, the Kubernetes one being off) lists no members, as upstream; enabling it again
// lists the node.
func TestMembersDiscoveryDisabled(t *testing.T) {
	env := startNode(t)

	cfg := func(enabled, service bool) resource.Resource {
		return ctest.MachineConfig(t, machine.TypeWorker, discovery(enabled, service, nowhere))
	}

	env.Create(append(node("w1", testAddr(3)), cfg(true, true))...)
	ctest.AssertIDs[*cluster.Member](env, "w1")

	env.Put(cfg(false, true))
	ctest.AssertIDs[*cluster.Member](env)
	ctest.AssertIDs[*cluster.Affiliate](env)

	env.Put(cfg(true, true))
	ctest.AssertIDs[*cluster.Member](env, "w1")

	env.Put(cfg(true, false))
	ctest.AssertIDs[*cluster.Member](env)
}

// TestMembersFromAffiliates: a member per affiliate with a node name, by that name, with its
// control plane's API server port; one without a node name (a KubeSpan peer only) is none.
func TestMembersFromAffiliates(t *testing.T) {
	env := ctest.Start(t, &clusterctrl.MemberController{})

	cp := cluster.NewAffiliate(cluster.NamespaceName, "id-cp")
	*cp.TypedSpec() = cluster.AffiliateSpec{
		NodeID: "id-cp", Hostname: "cp.example", Nodename: "cp", MachineType: machine.TypeControlPlane, OperatingSystem: "Talos (v1.11.0)",
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, ControlPlane: &cluster.ControlPlane{APIServerPort: 7443},
	}

	peer := cluster.NewAffiliate(cluster.NamespaceName, "id-peer")
	*peer.TypedSpec() = cluster.AffiliateSpec{NodeID: "id-peer", Hostname: "peer", MachineType: machine.TypeWorker}

	env.Create(cp, peer)

	ctest.AssertResource(env, "cp", func(r *cluster.Member, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal("id-cp", spec.NodeID)
		a.Equal("cp.example", spec.Hostname)
		a.Equal(machine.TypeControlPlane, spec.MachineType)
		a.Equal("Talos (v1.11.0)", spec.OperatingSystem)
		a.Equal([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, spec.Addresses)

		if a.NotNil(spec.ControlPlane) {
			a.Equal(7443, spec.ControlPlane.APIServerPort)
		}
	})
	ctest.AssertIDs[*cluster.Member](env, "cp")

	env.Destroy(cp)
	ctest.AssertIDs[*cluster.Member](env)
}
