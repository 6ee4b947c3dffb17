// Package secrets holds the controllers of the secrets namespace: the OS root of trust from the
// machine config, the API certificate names, apid's and trustd's certificates (signed locally on
// control planes, by trustd for workers), and the writers of the files apid and trustd read.
package secrets

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// LifetimeEnv, when set to a Go duration, overrides the lifetime of the node's certificates.
// Only tests set it (to watch rotation happen).
const LifetimeEnv = "TALOS_TEST_CERT_LIFETIME"

// DefaultLifetime is the lifetime of the node's certificates: a day, as Talos's own.
const DefaultLifetime = 24 * time.Hour

// Lifetime is the lifetime of the node's certificates.
func Lifetime() time.Duration {
	if v := os.Getenv(LifetimeEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}

	return DefaultLifetime
}

// RootController publishes the OS root of trust (secrets.OSRoot) from the machine config: the
// issuing CA (its key only on control planes), the accepted CAs, machine.certSANs and the token.
type RootController struct{}

// Name implements controller.Controller.
func (ctrl *RootController) Name() string { return "secrets.RootController" }

// Inputs implements controller.Controller.
func (ctrl *RootController) Inputs() []controller.Input {
	return []controller.Input{{
		Namespace: config.NamespaceName, Type: config.MachineConfigType,
		ID: optional.Some(config.ActiveID), Kind: controller.InputWeak,
	}}
}

// Outputs implements controller.Controller.
func (ctrl *RootController) Outputs() []controller.Output {
	return []controller.Output{{Type: secrets.OSRootType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *RootController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil {
			if state.IsNotFoundError(err) {
				continue
			}

			return fmt.Errorf("reading machine config: %w", err)
		}

		if cfg.Config().Machine() == nil || cfg.Config().Machine().Security() == nil {
			continue
		}

		sec := cfg.Config().Machine().Security()

		if err = safe.WriterModify(ctx, r, secrets.NewOSRoot(secrets.OSRootID), func(res *secrets.OSRoot) error {
			spec := res.TypedSpec()

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

			spec.CertSANIPs, spec.CertSANDNSNames = nil, nil
			for _, san := range sec.CertSANs() {
				if ip, perr := netip.ParseAddr(san); perr == nil {
					spec.CertSANIPs = append(spec.CertSANIPs, ip)
				} else {
					spec.CertSANDNSNames = append(spec.CertSANDNSNames, san)
				}
			}

			spec.Token = sec.Token()

			return nil
		}); err != nil {
			return fmt.Errorf("writing os root: %w", err)
		}
	}
}
