package secrets

import (
	"context"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
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
				spec.AppendIPs(addrs.TypedSpec().IPs()...)
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
		),
	)
}

// KubernetesServiceNames are the names of the "kubernetes" Service in a cluster whose DNS
// domain is domain.
func KubernetesServiceNames(domain string) []string {
	return []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + domain}
}
