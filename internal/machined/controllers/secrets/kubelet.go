package secrets

import (
	"bytes"
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// KubeletController publishes what kubelet needs to join (secrets.Kubelet).
type KubeletController = transform.Controller[*config.MachineConfig, *secrets.Kubelet]

// NewKubeletController declares Kubelet secrets on every node from the active machine config:
// the API server's endpoint, the CAs kubelet trusts it by (cluster.ca, then the accepted ones)
// and the bootstrap token it joins with.
func NewKubeletController() *KubeletController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *secrets.Kubelet]{
			Name: "secrets.KubeletController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*secrets.Kubelet] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*secrets.Kubelet]()
				}

				return optional.Some(secrets.NewKubelet(secrets.KubeletID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *secrets.Kubelet) error {
				cluster := cfg.Config().Cluster()
				if cluster == nil || cluster.Endpoint() == nil || cluster.IssuingCA() == nil || cluster.Token() == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no cluster endpoint, CA or token")
				}

				spec := out.TypedSpec()
				spec.Endpoint = cluster.Endpoint()
				spec.BootstrapTokenID = cluster.Token().ID()
				spec.BootstrapTokenSecret = cluster.Token().Secret()

				spec.AcceptedCAs = []*x509.PEMEncodedCertificate{{Crt: cluster.IssuingCA().Crt}}
				for _, ca := range cluster.AcceptedCAs() {
					if ca != nil && len(ca.Crt) > 0 && !bytes.Equal(ca.Crt, cluster.IssuingCA().Crt) {
						spec.AcceptedCAs = append(spec.AcceptedCAs, ca)
					}
				}

				return nil
			},
		},
	)
}
