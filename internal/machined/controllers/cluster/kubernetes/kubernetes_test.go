package kubernetes_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource/rtestutils"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	k8sregistry "github.com/talos-go/talos/internal/machined/controllers/cluster/kubernetes"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/testenv"
)

var raw = rtestutils.WithNamespace(cluster.RawNamespaceName)

// TestNodeAffiliateRoundTrip: what NodeAnnotations writes, NodeAffiliate reads back, with the
// Node's own name, hostname, OS image and role; a value that does not parse is left out, and a
// Node without a node id is no affiliate.
func TestNodeAffiliateRoundTrip(t *testing.T) {
	spec := &cluster.AffiliateSpec{
		NodeID:    "id-1",
		Addresses: []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("fd00::2")},
		KubeSpan: cluster.KubeSpanAffiliateSpec{
			PublicKey:           "pub1",
			Address:             netip.MustParseAddr("fd7a::1"),
			AdditionalAddresses: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
			Endpoints:           []netip.AddrPort{netip.MustParseAddrPort("10.5.0.2:51820"), netip.MustParseAddrPort("[fd00::2]:51820")},
		},
		ControlPlane: &cluster.ControlPlane{APIServerPort: 6443},
	}

	annotations := k8sregistry.NodeAnnotations("id-1", spec)
	assert.Equal(t, "10.5.0.2,fd00::2", annotations[constants.NetworkSelfIPsAnnotation])
	assert.Equal(t, "10.5.0.2:51820,[fd00::2]:51820", annotations[constants.KubeSpanKnownEndpointsAnnotation])
	assert.Equal(t, "6443", annotations[constants.NetworkAPIServerPortAnnotation])

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "cp1", Annotations: annotations, Labels: map[string]string{constants.LabelNodeRoleControlPlane: ""}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.5.0.2"}, {Type: corev1.NodeHostName, Address: "host-1"}},
			NodeInfo:  corev1.NodeSystemInfo{OSImage: "Talos (v1.11.0)"},
		},
	}

	want := *spec
	want.Nodename, want.Hostname, want.OperatingSystem, want.MachineType = "cp1", "host-1", "Talos (v1.11.0)", machine.TypeControlPlane

	assert.Equal(t, &want, k8sregistry.NodeAffiliate(node))

	// A worker without KubeSpan or an API server: those annotations are removed, and read as
	// nothing.
	worker := k8sregistry.NodeAnnotations("id-2", &cluster.AffiliateSpec{Addresses: []netip.Addr{netip.MustParseAddr("10.5.0.3")}})
	assert.Empty(t, worker[constants.KubeSpanPublicKeyAnnotation])
	assert.Empty(t, worker[constants.KubeSpanIPAnnotation])
	assert.Empty(t, worker[constants.NetworkAPIServerPortAnnotation])

	node.Labels = nil
	node.Annotations = map[string]string{
		constants.ClusterNodeIDAnnotation:          "id-2",
		constants.NetworkSelfIPsAnnotation:         "10.5.0.3,not-an-ip",
		constants.NetworkAPIServerPortAnnotation:   "many",
		constants.KubeSpanKnownEndpointsAnnotation: "10.5.0.3",
	}

	got := k8sregistry.NodeAffiliate(node)
	assert.Equal(t, machine.TypeWorker, got.MachineType)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.5.0.3")}, got.Addresses)
	assert.Nil(t, got.ControlPlane)
	assert.Empty(t, got.KubeSpan.Endpoints)

	delete(node.Annotations, constants.ClusterNodeIDAnnotation)
	assert.Nil(t, k8sregistry.NodeAffiliate(node))
}

// registryNode is one node's runtime with the registry's two controllers and what they read.
func registryNode(t *testing.T, kubeconfig, nodeID, nodename string, enabled bool, spec cluster.AffiliateSpec) *ctest.Env {
	t.Helper()

	env := ctest.Start(t, &k8sregistry.KubernetesPushController{RetryInterval: 100 * time.Millisecond},
		&k8sregistry.KubernetesPullController{RetryInterval: 100 * time.Millisecond})

	kube := secrets.NewKubernetes()
	kube.TypedSpec().LocalhostAdminKubeconfig = kubeconfig

	identity := cluster.NewIdentity(cluster.NamespaceName, cluster.LocalIdentity)
	identity.TypedSpec().NodeID = nodeID

	name := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	name.TypedSpec().Nodename = nodename

	affiliate := cluster.NewAffiliate(cluster.NamespaceName, nodeID)
	spec.NodeID, spec.Nodename = nodeID, nodename
	*affiliate.TypedSpec() = spec

	env.Create(kube, identity, name, affiliate, discoveryConfig(enabled))

	return env
}

func discoveryConfig(enabled bool) *cluster.Config {
	cfg := cluster.NewConfig(config.NamespaceName, cluster.ConfigID)
	cfg.TypedSpec().DiscoveryEnabled = true
	cfg.TypedSpec().RegistryKubernetesEnabled = enabled

	return cfg
}

// createNode registers a Node as its kubelet would: its name, then its status.
func createNode(t *testing.T, nodes corev1client.NodeInterface, name, hostname string, controlPlane bool) {
	t.Helper()

	ctx := testenv.Context(t, time.Minute)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}

	if controlPlane {
		node.Labels = map[string]string{constants.LabelNodeRoleControlPlane: ""}
	}

	node, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	require.NoError(t, err)

	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: hostname}}
	node.Status.NodeInfo.OSImage = "Talos (test)"
	_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// TestKubernetesRegistry: against a real kube-apiserver, two nodes' push controllers annotate
// their own Nodes and each one's pull controller publishes the other's raw affiliate (not its
// own), with the Node's fields; a change travels, a deleted Node's affiliate goes, and a node
// whose registry is disabled drops the ones it published and pushes nothing until enabled.
func TestKubernetesRegistry(t *testing.T) {
	kubeconfig := testenv.StartAPIServer(t, "127.5.72.1")

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	require.NoError(t, err)

	nodes := clientset.NewForConfigOrDie(cfg).CoreV1().Nodes()

	testenv.WaitFor(t, "the API server", 45*time.Second, func() error {
		_, err := nodes.List(testenv.Context(t, 5*time.Second), metav1.ListOptions{})

		return err
	})

	createNode(t, nodes, "cp1", "host-cp1", true)
	createNode(t, nodes, "w1", "host-w1", false)

	a := registryNode(t, kubeconfig, "id-a", "cp1", true, cluster.AffiliateSpec{
		Addresses:    []netip.Addr{netip.MustParseAddr("10.5.0.2")},
		KubeSpan:     cluster.KubeSpanAffiliateSpec{PublicKey: "pub-a", Address: netip.MustParseAddr("fd7a::a")},
		ControlPlane: &cluster.ControlPlane{APIServerPort: 6443},
	})
	b := registryNode(t, kubeconfig, "id-b", "w1", true, cluster.AffiliateSpec{
		Addresses: []netip.Addr{netip.MustParseAddr("10.5.0.3")},
		KubeSpan:  cluster.KubeSpanAffiliateSpec{PublicKey: "pub-b", Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.5.0.3:51820")}},
	})

	ctest.AssertResource(a, "k8s/id-b", func(r *cluster.Affiliate, as *assert.Assertions) {
		s := r.TypedSpec()
		as.Equal("id-b", s.NodeID)
		as.Equal("w1", s.Nodename)
		as.Equal("host-w1", s.Hostname)
		as.Equal("Talos (test)", s.OperatingSystem)
		as.Equal(machine.TypeWorker, s.MachineType)
		as.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.3")}, s.Addresses)
		as.Equal("pub-b", s.KubeSpan.PublicKey)
		as.Equal([]netip.AddrPort{netip.MustParseAddrPort("10.5.0.3:51820")}, s.KubeSpan.Endpoints)
		as.Nil(s.ControlPlane)
	}, raw)
	ctest.AssertResource(b, "k8s/id-a", func(r *cluster.Affiliate, as *assert.Assertions) {
		s := r.TypedSpec()
		as.Equal("cp1", s.Nodename)
		as.Equal("host-cp1", s.Hostname)
		as.Equal(machine.TypeControlPlane, s.MachineType)
		as.Equal(netip.MustParseAddr("fd7a::a"), s.KubeSpan.Address)
		as.Equal(&cluster.ControlPlane{APIServerPort: 6443}, s.ControlPlane)
	}, raw)

	// Each node's own Node is its local affiliate already: only the other one is raw.
	rtestutils.AssertLength[*cluster.Affiliate](a.Ctx, t, a.State, 1, raw)
	rtestutils.AssertLength[*cluster.Affiliate](b.Ctx, t, b.State, 1, raw)

	// A change of b's affiliate reaches a; a field b no longer has goes from its Node.
	ctest.Update(b, cluster.NewAffiliate(cluster.NamespaceName, "id-b"), func(r *cluster.Affiliate) error {
		r.TypedSpec().Addresses = []netip.Addr{netip.MustParseAddr("10.5.0.4")}
		r.TypedSpec().KubeSpan = cluster.KubeSpanAffiliateSpec{}

		return nil
	})
	ctest.AssertResource(a, "k8s/id-b", func(r *cluster.Affiliate, as *assert.Assertions) {
		as.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.4")}, r.TypedSpec().Addresses)
		as.Empty(r.TypedSpec().KubeSpan.PublicKey)
	}, raw)

	node, err := nodes.Get(a.Ctx, "w1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, node.Annotations, constants.KubeSpanPublicKeyAnnotation)

	// A Node deleted: its affiliate goes.
	require.NoError(t, nodes.Delete(a.Ctx, "w1", metav1.DeleteOptions{}))
	ctest.AssertNoResource[*cluster.Affiliate](a, "k8s/id-b", raw)

	// b disabled: the affiliates it published go.
	b.Put(discoveryConfig(false))
	ctest.AssertNoResource[*cluster.Affiliate](b, "k8s/id-a", raw)

	// A node disabled from the start leaves its Node alone until it is enabled.
	createNode(t, nodes, "w2", "host-w2", false)

	c := registryNode(t, kubeconfig, "id-c", "w2", false, cluster.AffiliateSpec{Addresses: []netip.Addr{netip.MustParseAddr("10.5.0.5")}})

	// One left from before (a node rebooted with the registry now off) goes: the controllers
	// have seen the disabled config.
	stale := cluster.NewAffiliate(cluster.RawNamespaceName, "k8s/id-gone")
	require.NoError(t, c.State.Create(c.Ctx, stale, state.WithCreateOwner((&k8sregistry.KubernetesPullController{}).Name())))
	ctest.AssertNoResource[*cluster.Affiliate](c, "k8s/id-gone", raw)

	node, err = nodes.Get(c.Ctx, "w2", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, node.Annotations, constants.ClusterNodeIDAnnotation)

	c.Put(discoveryConfig(true))
	ctest.AssertResource(a, "k8s/id-c", func(r *cluster.Affiliate, as *assert.Assertions) {
		as.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.5")}, r.TypedSpec().Addresses)
	}, raw)
	ctest.AssertResource(c, "k8s/id-a", func(*cluster.Affiliate, *assert.Assertions) {}, raw)
}
