package controlplane_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// TestConfigs: a control plane's config resources carry the cluster section, defaults
// included, and a worker has none.
func TestConfigs(t *testing.T) {
	env := ctest.Start(t,
		controlplane.NewAPIServerConfigController(),
		controlplane.NewControllerManagerConfigController(),
		controlplane.NewSchedulerConfigController(),
		controlplane.NewAdmissionControlConfigController(),
		controlplane.NewAuditPolicyConfigController(),
		controlplane.NewAuthorizationConfigController(),
		controlplane.NewBootstrapManifestsConfigController(),
	)

	env.Create(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.APIServerConfig.ExtraArgsConfig = map[string]string{"feature-gates": "Foo=true"}
		c.ClusterConfig.ControllerManagerConfig.ExtraArgsConfig = map[string]string{"node-cidr-mask-size": "25"}
		c.ClusterConfig.SchedulerConfig.ExtraArgsConfig = map[string]string{"v": "2"}
		c.ClusterConfig.ClusterNetwork.ServiceSubnet = []string{"10.100.0.0/16"}
		c.ClusterConfig.ClusterNetwork.DNSDomain = "corp.local"
		c.ClusterConfig.ProxyConfig = &v1alpha1.ProxyConfig{ModeConfig: "ipvs", ExtraArgsConfig: map[string]string{"metrics-bind-address": "0.0.0.0:10249"}}
	}))

	ctest.AssertResource(env, k8s.APIServerConfigID, func(r *k8s.APIServerConfig, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("registry.k8s.io/kube-apiserver:v1.34.0", s.Image)
		a.Equal([]string{"https://localhost:2379"}, s.EtcdServers)
		a.Equal(6443, s.LocalPort)
		a.Equal([]string{"10.100.0.0/16"}, s.ServiceCIDRs)
		a.Equal("Foo=true", s.ExtraArgs["feature-gates"])
		a.Equal("$(POD_IP)", s.AdvertisedAddress)
		a.Equal("https://"+ctest.EndpointHost+":6443", s.ControlPlaneEndpoint)
	})
	ctest.AssertResource(env, k8s.ControllerManagerConfigID, func(r *k8s.ControllerManagerConfig, a *assert.Assertions) {
		a.True(r.TypedSpec().Enabled)
		a.Equal("registry.k8s.io/kube-controller-manager:v1.34.0", r.TypedSpec().Image)
		a.Equal([]string{"10.244.0.0/16"}, r.TypedSpec().PodCIDRs)
		a.Equal("25", r.TypedSpec().ExtraArgs["node-cidr-mask-size"])
	})
	ctest.AssertResource(env, k8s.SchedulerConfigID, func(r *k8s.SchedulerConfig, a *assert.Assertions) {
		a.Equal("registry.k8s.io/kube-scheduler:v1.34.0", r.TypedSpec().Image)
		a.Equal("2", r.TypedSpec().ExtraArgs["v"])
	})
	ctest.AssertResource(env, k8s.AdmissionControlConfigID, func(r *k8s.AdmissionControlConfig, a *assert.Assertions) {
		if a.Len(r.TypedSpec().Config, 1) {
			a.Equal("PodSecurity", r.TypedSpec().Config[0].Name)
		}
	})
	ctest.AssertResource(env, k8s.AuditPolicyConfigID, func(r *k8s.AuditPolicyConfig, a *assert.Assertions) {
		a.Equal("Policy", r.TypedSpec().Config["kind"])
	})
	ctest.AssertResource(env, k8s.AuthorizationConfigID, func(r *k8s.AuthorizationConfig, a *assert.Assertions) {
		a.Equal([]k8s.AuthorizationAuthorizersSpec{{Type: "Node", Name: "node"}, {Type: "RBAC", Name: "rbac"}}, r.TypedSpec().Config)
	})
	ctest.AssertResource(env, k8s.BootstrapManifestsConfigID, func(r *k8s.BootstrapManifestsConfig, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("10.100.0.10", s.DNSServiceIP)
		a.Equal("corp.local", s.ClusterDomain)
		a.True(s.ProxyEnabled)
		a.Equal("registry.k8s.io/kube-proxy:v1.34.0", s.ProxyImage)
		a.Contains(s.ProxyArgs, "--proxy-mode=ipvs")
		a.Contains(s.ProxyArgs, "--cluster-cidr=10.244.0.0/16")
		a.Contains(s.ProxyArgs, "--metrics-bind-address=0.0.0.0:10249")
		a.True(s.CoreDNSEnabled)
		a.Equal("registry.k8s.io/coredns/coredns:v1.12.1", s.CoreDNSImage)
		a.True(s.FlannelEnabled)
		a.Equal("ghcr.io/siderolabs/flannel:v0.26.7", s.FlannelImage)
		// KubePrism (on in generated configs): flannel and kube-proxy reach the API through it.
		a.Equal("127.0.0.1", s.FlannelKubeServiceHost)
		a.Equal("7445", s.FlannelKubeServicePort)
		a.Equal("https://127.0.0.1:7445", s.Server)
	})

	// The node becomes a worker: its control-plane configs go.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	ctest.AssertNoResource[*k8s.APIServerConfig](env, k8s.APIServerConfigID)
	ctest.AssertNoResource[*k8s.BootstrapManifestsConfig](env, k8s.BootstrapManifestsConfigID)
}
