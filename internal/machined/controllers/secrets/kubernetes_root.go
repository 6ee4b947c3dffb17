package secrets

import (
	"context"
	"fmt"
	"net/url"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// KubernetesRootController publishes the Kubernetes root of trust (secrets.KubernetesRoot).
type KubernetesRootController = transform.Controller[*config.MachineConfig, *secrets.KubernetesRoot]

// NewKubernetesRootController declares KubernetesRoot "k8s" from the active machine config of a
// control plane: the cluster CA, the aggregator CA, the service-account key, the endpoints, the
// API server's names, the service subnets' API server IPs and the bootstrap token. Workers have
// none: they hold no Kubernetes CA key.
func NewKubernetesRootController() *KubernetesRootController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *secrets.KubernetesRoot]{
			Name: "secrets.KubernetesRootController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*secrets.KubernetesRoot] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*secrets.KubernetesRoot]()
				}

				if m := cfg.Config().Machine(); m == nil || !m.Type().IsControlPlane() {
					return optional.None[*secrets.KubernetesRoot]()
				}

				return optional.Some(secrets.NewKubernetesRoot(secrets.KubernetesRootID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *secrets.KubernetesRoot) error {
				cluster := cfg.Config().Cluster()
				if cluster == nil || cluster.Endpoint() == nil || cluster.IssuingCA() == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no cluster.controlPlane.endpoint or cluster.ca")
				}

				apiIPs, err := cluster.Network().APIServerIPs()
				if err != nil {
					return fmt.Errorf("cluster.network.serviceSubnets: %w", err)
				}

				spec := out.TypedSpec()
				spec.Name = cluster.Name()
				spec.Endpoint = cluster.Endpoint()
				spec.LocalEndpoint = &url.URL{Scheme: "https", Host: fmt.Sprintf("localhost:%d", cluster.LocalAPIServerPort())}
				spec.CertSANs = cluster.CertSANs()
				spec.APIServerIPs = apiIPs
				spec.DNSDomain = cluster.Network().DNSDomain()
				spec.IssuingCA = cluster.IssuingCA()
				// As upstream, the issuing CA is one of the accepted CAs.
				spec.AcceptedCAs = append(cluster.AcceptedCAs(), &x509.PEMEncodedCertificate{Crt: spec.IssuingCA.Crt})
				spec.AggregatorCA = cluster.AggregatorCA()
				spec.ServiceAccount = cluster.ServiceAccount()
				spec.AESCBCEncryptionSecret = cluster.AESCBCEncryptionSecret()
				spec.SecretboxEncryptionSecret = cluster.SecretboxEncryptionSecret()
				spec.BootstrapTokenID = cluster.Token().ID()
				spec.BootstrapTokenSecret = cluster.Token().Secret()

				return nil
			},
		},
	)
}
