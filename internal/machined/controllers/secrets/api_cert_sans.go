package secrets

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// APICertSANsController publishes the names the node's API certificate must carry (CertSAN
// "api"): the node addresses, the hostname and FQDN, and machine.certSANs.
type APICertSANsController struct{}

// Name implements controller.Controller.
func (ctrl *APICertSANsController) Name() string { return "secrets.APICertSANsController" }

// Inputs implements controller.Controller.
func (ctrl *APICertSANsController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.OSRootType, ID: optional.Some(secrets.OSRootID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.HostnameStatusType, ID: optional.Some(network.HostnameID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.NodeAddressType, ID: optional.Some(network.NodeAddressAccumulativeID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *APICertSANsController) Outputs() []controller.Output {
	return []controller.Output{{Type: secrets.CertSANType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *APICertSANsController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		root, err := safe.ReaderGetByID[*secrets.OSRoot](ctx, r, secrets.OSRootID)
		if err != nil {
			if state.IsNotFoundError(err) {
				continue
			}

			return fmt.Errorf("reading os root: %w", err)
		}

		hostname, err := safe.ReaderGetByID[*network.HostnameStatus](ctx, r, network.HostnameID)
		if err != nil {
			if state.IsNotFoundError(err) {
				continue
			}

			return fmt.Errorf("reading hostname: %w", err)
		}

		addrs, err := safe.ReaderGetByID[*network.NodeAddress](ctx, r, network.NodeAddressAccumulativeID)
		if err != nil {
			if state.IsNotFoundError(err) {
				continue
			}

			return fmt.Errorf("reading node addresses: %w", err)
		}

		if err = safe.WriterModify(ctx, r, secrets.NewCertSAN(secrets.NamespaceName, secrets.CertSANAPIID), func(res *secrets.CertSAN) error {
			spec := res.TypedSpec()
			spec.Reset()

			spec.AppendIPs(addrs.TypedSpec().IPs()...)
			spec.AppendIPs(root.TypedSpec().CertSANIPs...)
			spec.AppendDNSNames(hostname.TypedSpec().Hostname)
			spec.AppendDNSNames(hostname.TypedSpec().FQDN())
			spec.AppendDNSNames(root.TypedSpec().CertSANDNSNames...)
			spec.FQDN = hostname.TypedSpec().FQDN()
			spec.Sort()

			return nil
		}); err != nil {
			return fmt.Errorf("writing api cert SANs: %w", err)
		}
	}
}
