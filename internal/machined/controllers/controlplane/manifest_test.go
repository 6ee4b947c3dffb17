package controlplane_test

import (
	"encoding/json"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

// find returns the object of kind and name in a manifest, or nil.
func find(m *k8s.Manifest, kind, name string) map[string]any {
	for _, item := range m.TypedSpec().Items {
		md, _ := item.Object["metadata"].(map[string]any)
		if item.Object["kind"] == kind && md["name"] == name {
			return item.Object
		}
	}

	return nil
}

// path walks an unstructured object by keys and list indexes.
func path(o any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := o.(map[string]any)
			o = m[k]
		case int:
			l, _ := o.([]any)
			if k >= len(l) {
				return nil
			}

			o = l[k]
		}
	}

	return o
}

func manifestEnv(t *testing.T) *ctest.Env {
	return ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		controlplane.NewBootstrapManifestsConfigController(),
		&controlplane.ManifestController{},
	)
}

// TestManifestsDefault: gen config's defaults give the token and RBAC, flannel, kube-proxy and
// CoreDNS, as plain JSON values.
func TestManifestsDefault(t *testing.T) {
	env := manifestEnv(t)
	cfg := ctest.MachineConfig(t, machine.TypeControlPlane)
	env.Create(cfg)

	ctest.AssertIDs[*k8s.Manifest](env,
		"00-kubelet-bootstrapping-token", "01-csr-approver-role-binding", "01-csr-node-bootstrap", "01-csr-renewal-role-binding",
		"05-flannel", "10-kube-proxy", "11-core-dns", "11-core-dns-svc", "11-kubelet-api-access")

	token := cfg.Config().Cluster().Token()

	ctest.AssertResource(env, "00-kubelet-bootstrapping-token", func(m *k8s.Manifest, a *assert.Assertions) {
		s := find(m, "Secret", "bootstrap-token-"+token.ID())
		a.Equal(token.Secret(), path(s, "stringData", "token-secret"))
		a.Equal("bootstrap.kubernetes.io/token", s["type"])
	})
	ctest.AssertResource(env, "01-csr-approver-role-binding", func(m *k8s.Manifest, a *assert.Assertions) {
		b := find(m, "ClusterRoleBinding", "system-bootstrap-approve-node-client-csr")
		a.Equal("system:certificates.k8s.io:certificatesigningrequests:nodeclient", path(b, "roleRef", "name"))
		a.Equal("system:bootstrappers", path(b, "subjects", 0, "name"))
	})
	ctest.AssertResource(env, "10-kube-proxy", func(m *k8s.Manifest, a *assert.Assertions) {
		ds := find(m, "DaemonSet", "kube-proxy")
		c := path(ds, "spec", "template", "spec", "containers", 0)
		a.Equal("registry.k8s.io/kube-proxy:v1.34.0", path(c, "image"))
		a.Equal("/usr/local/bin/kube-proxy", path(c, "command", 0))
		a.Equal(true, path(ds, "spec", "template", "spec", "hostNetwork"))
		// Generated configs enable KubePrism: host-network pods reach the API servers through it.
		a.Contains(path(find(m, "ConfigMap", "kubeconfig-in-cluster"), "data", "kubeconfig"), "server: https://127.0.0.1:7445")
	})
	ctest.AssertResource(env, "11-core-dns", func(m *k8s.Manifest, a *assert.Assertions) {
		d := find(m, "Deployment", "coredns")
		a.Equal(int64(2), path(d, "spec", "replicas"), "numbers are int64, as unstructured objects want")
		a.Equal("registry.k8s.io/coredns/coredns:v1.12.1", path(d, "spec", "template", "spec", "containers", 0, "image"))
		a.Contains(path(find(m, "ConfigMap", "coredns"), "data", "Corefile"), "kubernetes cluster.local in-addr.arpa ip6.arpa")
	})
	ctest.AssertResource(env, "11-core-dns-svc", func(m *k8s.Manifest, a *assert.Assertions) {
		a.Equal("10.96.0.10", path(find(m, "Service", "kube-dns"), "spec", "clusterIP"))
	})
	ctest.AssertResource(env, "05-flannel", func(m *k8s.Manifest, a *assert.Assertions) {
		cm := find(m, "ConfigMap", "kube-flannel-cfg")

		var net map[string]any
		if a.NoError(json.Unmarshal([]byte(path(cm, "data", "net-conf.json").(string)), &net)) {
			a.Equal("10.244.0.0/16", net["Network"])
			a.Equal("vxlan", path(net, "Backend", "Type"))
		}

		var cni map[string]any
		if a.NoError(json.Unmarshal([]byte(path(cm, "data", "cni-conf.json").(string)), &cni)) {
			a.Equal("flannel", path(cni, "plugins", 0, "type"))
		}

		ds := find(m, "DaemonSet", "kube-flannel")
		a.Equal("ghcr.io/siderolabs/flannel:v0.26.7", path(ds, "spec", "template", "spec", "containers", 0, "image"))
		a.Equal("/etc/cni/net.d/10-flannel.conflist", path(ds, "spec", "template", "spec", "initContainers", 0, "command", 3))
	})
}

// TestManifestsDisabled: CNI "none", proxy and CoreDNS disabled leave only the RBAC; inline
// manifests are added by name.
func TestManifestsDisabled(t *testing.T) {
	env := manifestEnv(t)
	env.Create(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "none"}
		c.ClusterConfig.ProxyConfig = &v1alpha1.ProxyConfig{Disabled: new(true)}
		c.ClusterConfig.CoreDNSConfig = &v1alpha1.CoreDNS{CoreDNSDisabled: new(true)}
		c.ClusterConfig.ClusterInlineManifests = v1alpha1.ClusterInlineManifests{{
			InlineManifestName:     "ns",
			InlineManifestContents: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: one\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: two\n",
		}}
	}))

	ctest.AssertIDs[*k8s.Manifest](env,
		"00-kubelet-bootstrapping-token", "01-csr-approver-role-binding", "01-csr-node-bootstrap", "01-csr-renewal-role-binding",
		"11-kubelet-api-access", "99-ns")

	ctest.AssertResource(env, "99-ns", func(m *k8s.Manifest, a *assert.Assertions) {
		a.NotNil(find(m, "Namespace", "one"))
		a.NotNil(find(m, "Namespace", "two"))
		a.Len(m.TypedSpec().Items, 2)
	})

}
