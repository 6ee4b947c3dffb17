package network

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// StatusController publishes the network's readiness (NetworkStatus, upstream's meaning): an
// address of the node's (NodeAddress current), a default route (connectivity), a hostname
// (HostnameStatus), and the node's resolvers known (ResolverStatus: the node's resolv.conf is
// written where it writes one). /etc/hosts is not awaited: a metal node keeps the image's.
type StatusController struct{}

// Name implements controller.Controller.
func (ctrl *StatusController) Name() string { return "network.StatusController" }

// Inputs implements controller.Controller.
func (ctrl *StatusController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: network.NamespaceName, Type: network.NodeAddressType, ID: optional.Some(network.NodeAddressCurrentID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.RouteStatusType, Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.HostnameStatusType, ID: optional.Some(network.HostnameID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.ResolverStatusType, ID: optional.Some(network.ResolverID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *StatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.StatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *StatusController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		var spec network.StatusSpec

		addrs, err := safe.ReaderGetByID[*network.NodeAddress](ctx, r, network.NodeAddressCurrentID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading the node's addresses: %w", err)
		}

		spec.AddressReady = err == nil && len(addrs.TypedSpec().Addresses) > 0

		routes, err := safe.ReaderListAll[*network.RouteStatus](ctx, r)
		if err != nil {
			return fmt.Errorf("listing routes: %w", err)
		}

		for route := range routes.All() {
			if dst := route.TypedSpec().Destination; !dst.IsValid() || dst.Bits() == 0 {
				spec.ConnectivityReady = true
			}
		}

		if spec.HostnameReady, err = exists(ctx, r, network.NewHostnameStatus(network.NamespaceName, network.HostnameID).Metadata()); err != nil {
			return err
		}

		if spec.EtcFilesReady, err = exists(ctx, r, network.NewResolverStatus(network.NamespaceName, network.ResolverID).Metadata()); err != nil {
			return err
		}

		if err = safe.WriterModify(ctx, r, network.NewStatus(network.NamespaceName, network.StatusID), func(res *network.Status) error {
			*res.TypedSpec() = spec

			return nil
		}); err != nil {
			return fmt.Errorf("writing the network status: %w", err)
		}
	}
}

// exists reports whether the singleton md names is there.
func exists(ctx context.Context, r controller.Runtime, md resource.Pointer) (bool, error) {
	_, err := r.Get(ctx, md)
	if err != nil && !state.IsNotFoundError(err) {
		return false, fmt.Errorf("reading %s: %w", md.ID(), err)
	}

	return err == nil, nil
}
