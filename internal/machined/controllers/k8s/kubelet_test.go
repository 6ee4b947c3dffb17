package k8s_test

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

// TestKubelet: machine.kubelet and the node's name and addresses become kubelet's config and
// spec; the static pod server's URL is taken once it is published.
func TestKubelet(t *testing.T) {
	env := ctest.Start(t,
		k8sctrl.NewKubeletConfigController(),
		k8sctrl.NewNodenameController(),
		k8sctrl.NewNodeIPConfigController(),
		k8sctrl.NewNodeIPController(),
		k8sctrl.NewKubeletSpecController(),
	)

	env.Create(append(node("Worker-1", "192.168.5.7", "10.5.0.3", "fd00::3"), ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineKubelet = &v1alpha1.KubeletConfig{
			KubeletExtraArgs:   map[string]string{"max-pods": "50"},
			KubeletExtraMounts: []v1alpha1.ExtraMount{{Source: "/var/mnt", Destination: "/var/mnt", Type: "bind", Options: []string{"bind", "rw"}}},
			KubeletExtraConfig: v1alpha1.Unstructured{Object: map[string]any{"maxParallelImagePulls": 3}},
			KubeletNodeIP:      &v1alpha1.KubeletNodeIPConfig{KubeletNodeIPValidSubnets: []string{"10.5.0.0/24", "fd00::/64"}},
		}
	}))...)

	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletConfig, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("ghcr.io/siderolabs/kubelet:v1.34.0", s.Image)
		a.Equal([]string{"10.96.0.10"}, s.ClusterDNS)
		a.Equal("cluster.local", s.ClusterDomain)
		a.Equal("50", s.ExtraArgs["max-pods"])
		a.Len(s.ExtraMounts, 1)
		a.Empty(s.StaticPodListURL)
	})
	ctest.AssertResource(env, k8s.NodenameID, func(r *k8s.Nodename, a *assert.Assertions) {
		a.Equal("worker-1", r.TypedSpec().Nodename)
	})
	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.NodeIP, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.3"), netip.MustParseAddr("fd00::3")}, r.TypedSpec().Addresses)
	})
	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletSpec, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("worker-1", s.ExpectedNodename)
		a.Contains(s.Args, "--node-ip=10.5.0.3,fd00::3")
		a.Contains(s.Args, "--hostname-override=worker-1")
		a.Contains(s.Args, "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubeconfig")
		a.Contains(s.Args, "--max-pods=50")
		a.Equal("cgroupfs", s.Config["cgroupDriver"])
		a.Equal([]any{"10.96.0.10"}, s.Config["clusterDNS"])
		a.Equal(int64(3), s.Config["maxParallelImagePulls"])
		a.Nil(s.Config["staticPodURL"])
		a.Len(s.ExtraMounts, 1)
		// The pods' resolv.conf (the host DNS's), and machine.features.diskQuotaSupport
		// (on in generated configs) as kubelet's quota monitoring.
		a.Equal("/system/resolved/resolv.conf", s.Config["resolvConf"])
		a.Equal(map[string]any{"LocalStorageCapacityIsolationFSQuotaMonitoring": true}, s.Config["featureGates"])
	})

	// The static pod server says where it serves.
	status := k8s.NewStaticPodServerStatus(k8s.NamespaceName, k8s.StaticPodServerStatusResourceID)
	status.TypedSpec().URL = "http://127.0.0.1:41234"
	env.Create(status)

	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletSpec, a *assert.Assertions) {
		a.Equal("http://127.0.0.1:41234", r.TypedSpec().Config["staticPodURL"])
	})

	// A new address in the valid subnet comes first only when the old one goes.
	ctest.Update(env, network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID), func(r *network.NodeAddress) error {
		r.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.5.0.9/24")}

		return nil
	})
	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.NodeIP, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.9")}, r.TypedSpec().Addresses)
	})
}

func TestChooseNodeIPs(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.244.0.1"), netip.MustParseAddr("172.20.0.2"),
		netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("2001:db8::2"),
	}
	excluded := []string{"10.244.0.0/16", "10.96.0.0/12"}

	for _, tc := range []struct {
		name  string
		valid []string
		want  []string
		err   string
	}{
		{"any", []string{"0.0.0.0/0", "::/0"}, []string{"172.20.0.2", "2001:db8::2"}, ""},
		{"one subnet", []string{"10.5.0.0/24"}, []string{"10.5.0.2"}, ""},
		{"negation", []string{"0.0.0.0/0", "!172.20.0.0/16"}, []string{"10.5.0.2"}, ""},
		{"pod subnet excluded", []string{"10.244.0.0/16"}, nil, ""},
		{"single address", []string{"2001:db8::2"}, []string{"2001:db8::2"}, ""},
		{"bad", []string{"10.5.0/24"}, nil, "validSubnets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k8sctrl.ChooseNodeIPs(addrs, tc.valid, excluded)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)

				return
			}

			require.NoError(t, err)

			var s []string
			for _, a := range got {
				s = append(s, a.String())
			}

			assert.Equal(t, tc.want, s)
		})
	}
}
