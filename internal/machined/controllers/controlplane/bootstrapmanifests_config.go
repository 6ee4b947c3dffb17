package controlplane

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/talos-go/talos/internal/images"
)

// BootstrapManifestsConfigController publishes what the bootstrap manifests are made of.
type BootstrapManifestsConfigController = transform.Controller[*config.MachineConfig, *k8s.BootstrapManifestsConfig]

// NewBootstrapManifestsConfigController declares BootstrapManifestsConfig from cluster.network
// (pod subnets, DNS domain, the CNI), cluster.proxy and cluster.coreDNS: kube-proxy and
// CoreDNS unless disabled, flannel when the CNI is the default one, and the DNS service at the
// tenth IP of the service subnet.
func NewBootstrapManifestsConfigController() *BootstrapManifestsConfigController {
	return fromConfig("controlplane.BootstrapManifestsConfigController", k8s.NewBootstrapManifestsConfig,
		func(c talosconfig.Config, out *k8s.BootstrapManifestsConfig) error {
			cluster := c.Cluster()

			dnsIPs, err := cluster.Network().DNSServiceIPs()
			if err != nil {
				return fmt.Errorf("cluster.network.serviceSubnets: %w", err)
			}

			spec := k8s.BootstrapManifestsConfigSpec{
				Server:         cluster.Endpoint().String(),
				ClusterDomain:  cluster.Network().DNSDomain(),
				PodCIDRs:       cluster.Network().PodCIDRs(),
				ProxyEnabled:   cluster.Proxy().Enabled(),
				ProxyImage:     cluster.Proxy().Image(),
				ProxyArgs:      proxyArgs(cluster),
				CoreDNSEnabled: cluster.CoreDNS().Enabled(),
				CoreDNSImage:   coreDNSImage(cluster.CoreDNS().Image()),
				FlannelEnabled: cluster.Network().CNI().Name() == constants.FlannelCNI,
				FlannelImage:   images.Flannel,

				// flannel starts before kube-proxy serves the kubernetes Service: it reaches the
				// API server at the endpoint.
				FlannelKubeServiceHost: cluster.Endpoint().Hostname(),
				FlannelKubeServicePort: cluster.Endpoint().Port(),

				PodSecurityPolicyEnabled: !cluster.APIServer().DisablePodSecurityPolicy(),
			}

			// With KubePrism, kube-proxy and flannel (host network, on every node) reach the API
			// servers through the node's own balancer, as upstream's.
			if prism := c.Machine().Features().KubePrism(); prism.Enabled() {
				spec.Server = fmt.Sprintf("https://127.0.0.1:%d", prism.Port())
				spec.FlannelKubeServiceHost = "127.0.0.1"
				spec.FlannelKubeServicePort = strconv.Itoa(prism.Port())
			}

			if spec.FlannelEnabled {
				spec.FlannelExtraArgs = cluster.Network().CNI().Flannel().ExtraArgs()
			}

			for _, ip := range dnsIPs {
				switch {
				case ip.Is4() && spec.DNSServiceIP == "":
					spec.DNSServiceIP = ip.String()
				case ip.Is6() && spec.DNSServiceIPv6 == "":
					spec.DNSServiceIPv6 = ip.String()
				}
			}

			*out.TypedSpec() = spec

			return nil
		})
}

// proxyArgs are kube-proxy's arguments as upstream: the pod subnets, the node's name, its
// kubeconfig, the mode, then cluster.proxy.extraArgs (which win), sorted.
func proxyArgs(cluster talosconfig.ClusterConfig) []string {
	args := map[string]string{
		"cluster-cidr":           strings.Join(cluster.Network().PodCIDRs(), ","),
		"hostname-override":      "$(NODE_NAME)",
		"kubeconfig":             "/etc/kubernetes/kubeconfig",
		"proxy-mode":             cluster.Proxy().Mode(),
		"conntrack-max-per-core": "0",
	}

	maps.Copy(args, cluster.Proxy().ExtraArgs())

	out := make([]string, 0, len(args))
	for _, k := range slices.Sorted(maps.Keys(args)) {
		out = append(out, "--"+k+"="+args[k])
	}

	return out
}
