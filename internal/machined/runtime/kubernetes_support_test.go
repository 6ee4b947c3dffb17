package runtime_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/machined/runtime"
)

func TestKubernetesSupport(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   machine.Type
		patch func(*v1alpha1.Config)
		want  []string // each in the error; none: accepted
	}{
		{name: "gen config control plane", typ: machine.TypeControlPlane},
		{name: "gen config worker", typ: machine.TypeWorker},
		{name: "cni none with inline manifests", typ: machine.TypeControlPlane, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "none"}
			c.ClusterConfig.ClusterInlineManifests = v1alpha1.ClusterInlineManifests{{InlineManifestName: "cni", InlineManifestContents: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cni\n"}}
		}},
		{name: "proxy and coredns disabled", typ: machine.TypeControlPlane, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ProxyConfig = &v1alpha1.ProxyConfig{Disabled: new(true)}
			c.ClusterConfig.CoreDNSConfig = &v1alpha1.CoreDNS{CoreDNSDisabled: new(true)}
		}},
		{name: "custom cni by url (fetched)", typ: machine.TypeControlPlane, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "custom", CNIUrls: []string{"https://example.org/cilium.yaml"}}
		}},
		{name: "custom cni without urls", typ: machine.TypeControlPlane, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "custom"}
		}, want: []string{"cluster.network.cni.urls", "give the URLs"}},
		{name: "extra manifests (fetched)", typ: machine.TypeControlPlane, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ExtraManifests = []string{"https://example.org/a.yaml", "https://example.org/b.yaml"}
		}},
		{name: "external cloud provider", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ExternalCloudProviderConfig = &v1alpha1.ExternalCloudProviderConfig{ExternalEnabled: new(true)}
		}, want: []string{"cluster.externalCloudProvider.enabled", "set it to false"}},
		{name: "credential provider", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.MachineConfig.MachineKubelet = &v1alpha1.KubeletConfig{
				KubeletCredentialProviderConfig: v1alpha1.Unstructured{Object: map[string]any{"kind": "CredentialProviderConfig"}},
			}
		}, want: []string{"machine.kubelet.credentialProviderConfig"}},
		{name: "host DNS resolving member names is honoured", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.MachineConfig.MachineFeatures.HostDNSSupport.HostDNSResolveMemberNames = new(true)
		}},
		{name: "registry mirrors and TLS are honoured", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.MachineConfig.MachineRegistries = v1alpha1.RegistriesConfig{
				RegistryMirrors: map[string]*v1alpha1.RegistryMirrorConfig{"docker.io": {MirrorEndpoints: []string{"http://10.5.0.1:5000"}}},
				RegistryConfig:  map[string]*v1alpha1.RegistryConfig{"10.5.0.1:5000": {RegistryTLS: &v1alpha1.RegistryTLSConfig{TLSInsecureSkipVerify: new(true)}}},
			}
		}},
		{name: "registry credentials are honoured", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.MachineConfig.MachineRegistries = v1alpha1.RegistriesConfig{
				RegistryConfig: map[string]*v1alpha1.RegistryConfig{"registry.local": {RegistryAuth: &v1alpha1.RegistryAuthConfig{RegistryUsername: "u", RegistryPassword: "p"}}},
			}
		}},
		{name: "discovery off", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterDiscoveryConfig.DiscoveryEnabled = new(false)
		}},
		{name: "the kubernetes discovery registry is honoured", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterDiscoveryConfig.DiscoveryRegistries.RegistryKubernetes.RegistryDisabled = new(false)
		}},
		{name: "another discovery service is honoured", typ: machine.TypeWorker, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterDiscoveryConfig.DiscoveryRegistries.RegistryService.RegistryEndpoint = "http://10.5.0.1:3000/"
		}},
		{name: "two at once, both named", typ: machine.TypeControlPlane, patch: func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "custom"}
			c.ClusterConfig.ExternalCloudProviderConfig = &v1alpha1.ExternalCloudProviderConfig{ExternalEnabled: new(true)}
		}, want: []string{"cluster.network.cni.urls", "cluster.externalCloudProvider.enabled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var patches []func(*v1alpha1.Config)
			if tc.patch != nil {
				patches = append(patches, tc.patch)
			}

			// The whole check a node makes (configsupport's rules and KubernetesSupport).
			_, err := (&runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}}).Validate(ctest.MachineConfig(t, tc.typ, patches...).Provider())
			if len(tc.want) == 0 {
				require.NoError(t, err)

				return
			}

			require.Error(t, err)

			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
