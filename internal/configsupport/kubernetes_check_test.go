package configsupport_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/gen/xslices"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

var allNodes = []configsupport.Node{configsupport.Process, configsupport.Container, configsupport.Metal}

// genInput is the input `talosctl gen config` builds, for one cluster.
func genInput(t *testing.T) *generate.Input {
	t.Helper()

	in, err := generate.NewInput("c1", "https://10.5.0.2:6443", "1.34.0")
	require.NoError(t, err)

	return in
}

// Generated configs, and the patches the provisioners add in the Kubernetes area (a custom CNI
// by URL, scheduling on control planes without workers), pass on every node.
func TestKubernetesGeneratedConfigsPass(t *testing.T) {
	in := genInput(t)

	for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		cfg, err := in.Config(typ)
		require.NoError(t, err)

		patches, err := configpatcher.LoadPatches([]string{
			`{"cluster": {"network": {"cni": {"name": "custom", "urls": ["https://example.org/cni.yaml"]}}}}`,
			`{"cluster": {"allowSchedulingOnControlPlanes": true}}`,
		})
		require.NoError(t, err)

		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
		require.NoError(t, err)

		patched, err := out.Config()
		require.NoError(t, err)

		for _, node := range allNodes {
			assert.NoError(t, configsupport.Check(cfg, node), "%s on %s", typ, node)
			assert.NoError(t, configsupport.Check(patched, node), "%s with the provisioners' patches on %s", typ, node)
		}
	}
}

// Each refused subtree of the Kubernetes area refuses a config setting it, naming the path
// as written.
func TestKubernetesRefusals(t *testing.T) {
	in := genInput(t)

	for path, patch := range map[string]func(*v1alpha1.Config){
		"machine.kubelet.credentialProviderConfig": func(c *v1alpha1.Config) {
			c.MachineConfig.MachineKubelet.KubeletCredentialProviderConfig = v1alpha1.Unstructured{Object: map[string]any{"kind": "CredentialProviderConfig"}}
		},
		"cluster.externalCloudProvider": func(c *v1alpha1.Config) {
			c.ClusterConfig.ExternalCloudProviderConfig = &v1alpha1.ExternalCloudProviderConfig{ExternalEnabled: new(true)}
		},
		"cluster.etcd.image": func(c *v1alpha1.Config) {
			c.ClusterConfig.EtcdConfig.ContainerImage = "gcr.io/etcd-development/etcd:v3.5.0"
		},
	} {
		t.Run(path, func(t *testing.T) {
			cfg, err := in.Config(machine.TypeControlPlane)
			require.NoError(t, err)

			cfg, err = cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error { patch(c); return nil })
			require.NoError(t, err)

			for _, node := range allNodes {
				err := configsupport.Check(cfg, node)
				if assert.Error(t, err, node) {
					assert.Contains(t, err.Error(), path+": ", node)
				}
			}
		})
	}
}

// TestKubeletFieldsTakeEffect: the kubelet settings become kubelet's image, arguments and
// KubeletConfiguration.
func TestKubeletFieldsTakeEffect(t *testing.T) {
	env := ctest.Start(t,
		k8sctrl.NewKubeletConfigController(),
		k8sctrl.NewNodenameController(),
		k8sctrl.NewNodeIPConfigController(),
		k8sctrl.NewNodeIPController(),
		k8sctrl.NewKubeletSpecController(),
	)

	hostname := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hostname.TypedSpec().Hostname, hostname.TypedSpec().Domainname = "w1", "corp.example"

	addrs := network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID)
	addrs.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.5.0.3/24")}

	env.Create(hostname, addrs, ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		k := c.MachineConfig.MachineKubelet
		k.KubeletImage = "example.org/kubelet:v1.34.0-custom"
		k.KubeletClusterDNS = []string{"10.96.0.53"}
		k.KubeletDefaultRuntimeSeccompProfileEnabled = new(false)
		k.KubeletRegisterWithFQDN = new(true)
		k.KubeletSkipNodeRegistration = new(true)
		k.KubeletDisableManifestsDirectory = new(false)
	}))

	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletSpec, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("example.org/kubelet:v1.34.0-custom", s.Image)
		a.Contains(s.Args, "--hostname-override=w1.corp.example")
		a.Equal([]any{"10.96.0.53"}, s.Config["clusterDNS"])
		a.Equal(false, s.Config["seccompDefault"])
		a.Equal(false, s.Config["registerNode"])
		a.Equal(k8sctrl.KubeletManifestsDir, s.Config["staticPodPath"])
	})

	// The generated defaults: seccomp on, the manifests folder off, registered by short name.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))

	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletSpec, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("ghcr.io/siderolabs/kubelet:v1.34.0", s.Image)
		a.Contains(s.Args, "--hostname-override=w1")
		a.Equal(true, s.Config["seccompDefault"])
		a.Equal(true, s.Config["registerNode"])
		a.Nil(s.Config["staticPodPath"])
	})
}

// TestControlPlaneFieldsTakeEffect: the components' images, environment, resources, volumes,
// the scheduler's config and extra authorizers reach the static pods and their files; the
// kube-proxy and CoreDNS images and flannel's arguments reach the bootstrap manifests.
func TestControlPlaneFieldsTakeEffect(t *testing.T) {
	dir := t.TempDir()
	env := ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubernetesCertSANsController(),
		&secretsctrl.KubernetesDynamicCertsController{},
		&secretsctrl.KubernetesController{},
		controlplane.NewAPIServerConfigController(),
		controlplane.NewControllerManagerConfigController(),
		controlplane.NewSchedulerConfigController(),
		controlplane.NewAdmissionControlConfigController(),
		controlplane.NewAuditPolicyConfigController(),
		controlplane.NewAuthorizationConfigController(),
		controlplane.NewBootstrapManifestsConfigController(),
		&controlplane.ManifestController{},
		k8sctrl.NewNodeIPConfigController(),
		&k8sctrl.StaticPodController{SecretsDir: filepath.Join(dir, "secrets"), ConfigDir: filepath.Join(dir, "config"), AuditLogDir: filepath.Join(dir, "audit")},
	)

	hostname := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hostname.TypedSpec().Hostname = "cp1"

	addrs := network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID)
	addrs.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}

	res := &v1alpha1.ResourcesConfig{
		Requests: v1alpha1.Unstructured{Object: map[string]any{"cpu": "111m"}},
		Limits:   v1alpha1.Unstructured{Object: map[string]any{"memory": "999Mi"}},
	}
	vol := []v1alpha1.VolumeMountConfig{{VolumeHostPath: "/var/lib/x", VolumeMountPath: "/x", VolumeReadOnly: true}}

	env.Create(hostname, addrs, ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		api := c.ClusterConfig.APIServerConfig
		api.EnvConfig = map[string]string{"API_ENV": "a"}
		api.ResourcesConfig = res
		api.ExtraVolumesConfig = vol
		api.AuthorizationConfigConfig = v1alpha1.AuthorizationConfigAuthorizerConfigList{{
			AuthorizerType: "Webhook", AuthorizerName: "hook",
			AuthorizerWebhook: v1alpha1.Unstructured{Object: map[string]any{"timeout": "3s"}},
		}}

		cm := c.ClusterConfig.ControllerManagerConfig
		cm.ContainerImage = "example.org/kcm:custom"
		cm.EnvConfig = map[string]string{"KCM_ENV": "b"}
		cm.ResourcesConfig = res
		cm.ExtraVolumesConfig = vol

		s := c.ClusterConfig.SchedulerConfig
		s.EnvConfig = map[string]string{"SCHED_ENV": "c"}
		s.ResourcesConfig = res
		s.SchedulerConfig = v1alpha1.Unstructured{Object: map[string]any{"parallelism": 7}}

		c.ClusterConfig.ProxyConfig.ContainerImage = "example.org/kube-proxy:custom"
		c.ClusterConfig.CoreDNSConfig = &v1alpha1.CoreDNS{CoreDNSImage: "example.org/coredns:custom"}
		c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "flannel", CNIFlannel: &v1alpha1.FlannelCNIConfig{FlanneldExtraArgs: []string{"--iface=eth9"}}}
	}))

	pod := func(id string, check func(c map[string]any, a *assert.Assertions)) {
		ctest.AssertResource(env, id, func(r *k8s.StaticPod, a *assert.Assertions) {
			spec, _ := r.TypedSpec().Pod["spec"].(map[string]any)
			containers, _ := spec["containers"].([]any)
			if a.NotEmpty(containers) {
				check(plainJSON(containers[0]), a)
			}
		})
	}

	// The config's request and limit (upstream's default memory request stays beside them).
	wantResources := []any{"111m", "999Mi"}
	pick := func(r any) []any {
		m, _ := r.(map[string]any)
		req, _ := m["requests"].(map[string]any)
		lim, _ := m["limits"].(map[string]any)

		return []any{req["cpu"], lim["memory"]}
	}

	pod("kube-apiserver", func(c map[string]any, a *assert.Assertions) {
		a.Contains(c["env"], map[string]any{"name": "API_ENV", "value": "a"})
		a.Equal(wantResources, pick(c["resources"]))
		a.Contains(c["volumeMounts"], map[string]any{"name": "x", "mountPath": "/x", "readOnly": true}, "volumes: %v", c["volumeMounts"])
	})
	pod("kube-controller-manager", func(c map[string]any, a *assert.Assertions) {
		a.Equal("example.org/kcm:custom", c["image"])
		a.Contains(c["env"], map[string]any{"name": "KCM_ENV", "value": "b"})
		a.Equal(wantResources, pick(c["resources"]))
		a.Contains(c["volumeMounts"], map[string]any{"name": "x", "mountPath": "/x", "readOnly": true})
	})
	pod("kube-scheduler", func(c map[string]any, a *assert.Assertions) {
		a.Contains(c["env"], map[string]any{"name": "SCHED_ENV", "value": "c"})
		a.Equal(wantResources, pick(c["resources"]))
	})

	authz := filepath.Join(dir, "config", "kube-apiserver", "authorization-config.yaml")
	sched := filepath.Join(dir, "config", "kube-scheduler", "scheduler-config.yaml")
	env.WaitFile(authz)
	env.WaitFile(sched)

	data, err := os.ReadFile(authz)
	require.NoError(t, err)
	assert.Contains(t, string(data), "type: Webhook")
	assert.Contains(t, string(data), "name: hook")
	assert.Contains(t, string(data), "timeout: 3s")

	data, err = os.ReadFile(sched)
	require.NoError(t, err)
	assert.Contains(t, string(data), "parallelism: 7")

	manifest := func(id, want string) {
		ctest.AssertResource(env, id, func(m *k8s.Manifest, a *assert.Assertions) {
			raw, err := json.Marshal(xslices.Map(m.TypedSpec().Items, func(i k8s.SingleManifest) map[string]any { return i.Object }))
			a.NoError(err)
			a.True(strings.Contains(string(raw), want), "%s lacks %q", id, want)
		})
	}

	manifest("10-kube-proxy", `"image":"example.org/kube-proxy:custom"`)
	manifest("11-core-dns", `"image":"example.org/coredns:custom"`)
	manifest("05-flannel", `"--iface=eth9"`)
}

// plainJSON turns an unstructured value into plain JSON maps and lists, for comparisons.
func plainJSON(v any) map[string]any {
	raw, _ := json.Marshal(v)

	var out map[string]any
	_ = json.Unmarshal(raw, &out)

	return out
}

var _ resource.Resource = (*k8s.StaticPod)(nil)
