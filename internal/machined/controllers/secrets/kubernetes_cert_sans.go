package secrets

import (
	"context"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// KubernetesCertSANsController publishes the names the API server's certificate must carry.
type KubernetesCertSANsController = transform.Controller[*secrets.KubernetesRoot, *secrets.CertSAN]

// NewKubernetesCertSANsController declares CertSAN "k8s" as upstream: the service IPs of the
// API server, kubernetes, kubernetes.default, kubernetes.default.svc and its name in the
// cluster's DNS domain, localhost and 127.0.0.1, the endpoint's host, cluster.apiServer.certSANs,
// the node's addresses, hostname and FQDN.
func NewKubernetesCertSANsController() *KubernetesCertSANsController {
	return transform.NewController(
		transform.Settings[*secrets.KubernetesRoot, *secrets.CertSAN]{
			Name: "secrets.KubernetesCertSANsController",
			MapMetadataOptionalFunc: func(root *secrets.KubernetesRoot) optional.Optional[*secrets.CertSAN] {
				if root.Metadata().ID() != secrets.KubernetesRootID {
					return optional.None[*secrets.CertSAN]()
				}

				return optional.Some(secrets.NewCertSAN(secrets.NamespaceName, secrets.CertSANKubernetesID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, root *secrets.KubernetesRoot, out *secrets.CertSAN) error {
				hostname, err := safe.ReaderGetByID[*network.HostnameStatus](ctx, r, network.HostnameID)
				if err != nil {
					return waitFor("hostname", err)
				}

				addrs, err := safe.ReaderGetByID[*network.NodeAddress](ctx, r, network.NodeAddressAccumulativeID)
				if err != nil {
					return waitFor("node addresses", err)
				}

				nodeIP, err := safe.ReaderGetByID[*k8s.NodeIPConfig](ctx, r, k8s.KubeletID)
				if err != nil {
					return waitFor("node IP config", err)
				}

				rs := root.TypedSpec()
				spec := out.TypedSpec()
				spec.Reset()

				spec.AppendIPs(rs.APIServerIPs...)
				spec.AppendIPs(netip.MustParseAddr("127.0.0.1"))
				spec.AppendDNSNames(KubernetesServiceNames(rs.DNSDomain)...)
				spec.AppendDNSNames("localhost")

				if rs.Endpoint != nil {
					spec.Append(rs.Endpoint.Hostname())
				}

				spec.Append(rs.CertSANs...)
				// Not the pod and service networks' addresses (the CNI's bridge): they come and go
				// with pods, and each change would re-issue the certificate and restart the API
				// server, as upstream's filtered node addresses avoid.
				spec.AppendIPs(outside(addrs.TypedSpec().IPs(), nodeIP.TypedSpec().ExcludeSubnets)...)
				spec.AppendDNSNames(hostname.TypedSpec().Hostname, hostname.TypedSpec().FQDN())
				spec.FQDN = hostname.TypedSpec().FQDN()
				spec.Sort()

				return nil
			},
		},
		transform.WithOutputKind(controller.OutputShared),
		transform.WithExtraInputs(
			controller.Input{Namespace: network.NamespaceName, Type: network.HostnameStatusType, ID: optional.Some(network.HostnameID), Kind: controller.InputWeak},
			controller.Input{Namespace: network.NamespaceName, Type: network.NodeAddressType, ID: optional.Some(network.NodeAddressAccumulativeID), Kind: controller.InputWeak},
			controller.Input{Namespace: k8s.NamespaceName, Type: k8s.NodeIPConfigType, ID: optional.Some(k8s.KubeletID), Kind: controller.InputWeak},
		),
	)
}

// KubernetesServiceNames are the names of the "kubernetes" Service in a cluster whose DNS
// domain is domain.
func KubernetesServiceNames(domain string) []string {
	return []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + domain}
}

// outside returns the addresses not in any of the subnets (unparsable subnets are skipped).
func outside(addrs []netip.Addr, subnets []string) []netip.Addr {
	var prefixes []netip.Prefix

	for _, s := range subnets {
		if p, err := netip.ParsePrefix(s); err == nil {
			prefixes = append(prefixes, p)
		}
	}

	return slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool {
		return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
	})
}
