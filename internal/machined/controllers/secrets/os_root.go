// Package secrets holds the controllers of the secrets namespace: the OS root of trust from the
// machine config, the API certificate names, apid's and trustd's certificates (signed locally on
// control planes, by trustd for workers), and the writers of the files apid and trustd read.
package secrets

import (
	"context"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// RootController publishes the OS root of trust (secrets.OSRoot).
type RootController = transform.Controller[*config.MachineConfig, *secrets.OSRoot]

// NewRootController declares OSRoot from the active machine config: the issuing CA (its key
// only on control planes), the accepted CAs, machine.certSANs split into IPs and names, and the
// token. A config without machine.security leaves it as it was.
func NewRootController() *RootController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *secrets.OSRoot]{
			Name: "secrets.RootController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*secrets.OSRoot] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*secrets.OSRoot]()
				}

				return optional.Some(secrets.NewOSRoot(secrets.OSRootID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *secrets.OSRoot) error {
				if cfg.Config().Machine() == nil || cfg.Config().Machine().Security() == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no machine.security")
				}

				sec := cfg.Config().Machine().Security()
				spec := out.TypedSpec()

				spec.IssuingCA = nil
				if ca := sec.IssuingCA(); ca != nil {
					spec.IssuingCA = &x509.PEMEncodedCertificateAndKey{Crt: ca.Crt, Key: ca.Key}
				}

				spec.AcceptedCAs = nil
				for _, acc := range sec.AcceptedCAs() {
					if acc != nil && len(acc.Crt) > 0 {
						spec.AcceptedCAs = append(spec.AcceptedCAs, &x509.PEMEncodedCertificate{Crt: acc.Crt})
					}
				}

				// As upstream, the issuing CA is accepted too: readers of AcceptedCAs alone
				// (a worker's, whose config carries the CA's certificate only) trust it.
				if spec.IssuingCA != nil && len(spec.IssuingCA.Crt) > 0 {
					spec.AcceptedCAs = append(spec.AcceptedCAs, &x509.PEMEncodedCertificate{Crt: spec.IssuingCA.Crt})
				}

				spec.CertSANIPs, spec.CertSANDNSNames = nil, nil
				for _, san := range sec.CertSANs() {
					if ip, err := netip.ParseAddr(san); err == nil {
						spec.CertSANIPs = append(spec.CertSANIPs, ip)
					} else {
						spec.CertSANDNSNames = append(spec.CertSANDNSNames, san)
					}
				}

				// Pods reach the Talos API as the Service talos in default, as upstream.
				if cfg.Config().Machine().Features().KubernetesTalosAPIAccess().Enabled() {
					spec.CertSANDNSNames = append(spec.CertSANDNSNames, constants.KubernetesTalosAPIServiceName,
						constants.KubernetesTalosAPIServiceName+"."+constants.KubernetesTalosAPIServiceNamespace)
				}

				spec.Token = sec.Token()

				return nil
			},
		},
	)
}
