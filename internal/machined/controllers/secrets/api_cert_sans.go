package secrets

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// APICertSANsController publishes the names the node's API certificate must carry.
type APICertSANsController = transform.Controller[*secrets.OSRoot, *secrets.CertSAN]

// NewAPICertSANsController declares CertSAN "api" from the OS root: the node addresses, the
// hostname and FQDN, and machine.certSANs. It waits for the hostname and the addresses.
func NewAPICertSANsController() *APICertSANsController {
	return transform.NewController(
		transform.Settings[*secrets.OSRoot, *secrets.CertSAN]{
			Name: "secrets.APICertSANsController",
			MapMetadataOptionalFunc: func(root *secrets.OSRoot) optional.Optional[*secrets.CertSAN] {
				if root.Metadata().ID() != secrets.OSRootID {
					return optional.None[*secrets.CertSAN]()
				}

				return optional.Some(secrets.NewCertSAN(secrets.NamespaceName, secrets.CertSANAPIID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, root *secrets.OSRoot, out *secrets.CertSAN) error {
				hostname, err := safe.ReaderGetByID[*network.HostnameStatus](ctx, r, network.HostnameID)
				if err != nil {
					return waitFor("hostname", err)
				}

				addrs, err := safe.ReaderGetByID[*network.NodeAddress](ctx, r, network.NodeAddressAccumulativeID)
				if err != nil {
					return waitFor("node addresses", err)
				}

				spec := out.TypedSpec()
				spec.Reset()

				spec.AppendIPs(addrs.TypedSpec().IPs()...)
				spec.AppendIPs(root.TypedSpec().CertSANIPs...)
				spec.AppendDNSNames(hostname.TypedSpec().Hostname)
				spec.AppendDNSNames(hostname.TypedSpec().FQDN())
				spec.AppendDNSNames(root.TypedSpec().CertSANDNSNames...)
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

// waitFor turns a missing input into a skipped reconcile (its creation wakes the controller
// again); other read errors fail the controller.
func waitFor(what string, err error) error {
	if state.IsNotFoundError(err) {
		return xerrors.NewTaggedf[transform.SkipReconcileTag]("waiting for %s", what)
	}

	return fmt.Errorf("reading %s: %w", what, err)
}
