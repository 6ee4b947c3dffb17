package secrets

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// TrustdController issues trustd's serving certificate (secrets.Trustd) on nodes holding the
// CA key: the API names plus the control-plane endpoint's host, which workers dial.
type TrustdController struct {
	Lifetime time.Duration // DefaultLifetime when zero
}

// Name implements controller.Controller.
func (ctrl *TrustdController) Name() string { return "secrets.TrustdController" }

// Inputs implements controller.Controller.
func (ctrl *TrustdController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.OSRootType, ID: optional.Some(secrets.OSRootID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.CertSANType, ID: optional.Some(secrets.CertSANAPIID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineTypeType, ID: optional.Some(config.MachineTypeID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *TrustdController) Outputs() []controller.Output {
	return []controller.Output{{Type: secrets.TrustdType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *TrustdController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	lifetime := Lifetime(ctrl.Lifetime)

	ticks, stop := newCheckTicker(checkInterval(lifetime), log)
	defer stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticks:
		}

		if err := ctrl.reconcile(ctx, r, log, lifetime); err != nil {
			return err
		}
	}
}

func (ctrl *TrustdController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, lifetime time.Duration) error {
	root, err := safe.ReaderGetByID[*secrets.OSRoot](ctx, r, secrets.OSRootID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading os root: %w", err)
	}

	mtype, err := safe.ReaderGetByID[*config.MachineType](ctx, r, config.MachineTypeID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading machine type: %w", err)
	}

	if root == nil || mtype == nil || !mtype.MachineType().IsControlPlane() || !hasKey(root.TypedSpec()) {
		// Not (or no longer) a node that signs: no trustd certificate.
		if err = r.Destroy(ctx, secrets.NewTrustd().Metadata()); err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("removing trustd certificate: %w", err)
		}

		return nil
	}

	sans, err := safe.ReaderGetByID[*secrets.CertSAN](ctx, r, secrets.CertSANAPIID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil
		}

		return fmt.Errorf("reading api cert SANs: %w", err)
	}

	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil
		}

		return fmt.Errorf("reading machine config: %w", err)
	}

	rootSpec := root.TypedSpec()
	spec := *sans.TypedSpec()
	spec.IPs, spec.DNSNames = append(spec.IPs[:0:0], spec.IPs...), append(spec.DNSNames[:0:0], spec.DNSNames...)
	spec.Append(TrustdEndpoints(cfg.Config())...)
	spec.Sort()

	server := want{commonName: spec.FQDN, ips: spec.IPs, dns: spec.DNSNames, usage: x509.ExtKeyUsageServerAuth}
	bundle := caBundle(rootSpec)
	now := time.Now()

	cur, err := safe.ReaderGetByID[*secrets.Trustd](ctx, r, secrets.TrustdID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading trustd certificate: %w", err)
	}

	reason := "missing"
	if cur != nil {
		reason = current(cur.TypedSpec().Server, rootSpec.IssuingCA.Crt, server, now)
		if reason == "" && !sameBundle(cur.TypedSpec().AcceptedCAs, bundle) {
			reason = "accepted CAs changed"
		}
	}

	if reason == "" {
		return nil
	}

	pair, err := signLocal(rootSpec.IssuingCA, server, lifetime, now)
	if err != nil {
		return err
	}

	if err = safe.WriterModify(ctx, r, secrets.NewTrustd(), func(res *secrets.Trustd) error {
		res.TypedSpec().AcceptedCAs = bundle
		res.TypedSpec().Server = pair

		return nil
	}); err != nil {
		return fmt.Errorf("writing trustd certificate: %w", err)
	}

	log.Info("issued trustd certificate", zap.String("reason", reason))

	return nil
}
