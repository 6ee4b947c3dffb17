package network

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// ExternalLink is the link upstream files a platform's external addresses under: no kernel
// link has the name, so `get addresses` shows them apart from the links' own.
const ExternalLink = "external"

// ExternalAddressController publishes the platform's external (public) addresses, a cloud's
// 1:1 NAT or load balancer frontend that is on none of the node's links, as AddressStatus of
// the link "external" (ID external/<ip>/<bits>, global scope), as upstream's platform config
// controller does. NodeAddressController counts them current, not routed.
type ExternalAddressController struct {
	Addresses []netip.Addr
}

// Name implements controller.Controller.
func (ctrl *ExternalAddressController) Name() string { return "network.ExternalAddressController" }

// Inputs implements controller.Controller.
func (ctrl *ExternalAddressController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *ExternalAddressController) Outputs() []controller.Output {
	// Shared with AddressStatusController, which publishes the links' addresses.
	return []controller.Output{{Type: network.AddressStatusType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *ExternalAddressController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for _, ip := range ctrl.Addresses {
		prefix := netip.PrefixFrom(ip, ip.BitLen())

		family := nethelpers.FamilyInet6
		if ip.Is4() {
			family = nethelpers.FamilyInet4
		}

		if err := safe.WriterModify(ctx, r, network.NewAddressStatus(network.NamespaceName, network.AddressID(ExternalLink, prefix)), func(res *network.AddressStatus) error {
			*res.TypedSpec() = network.AddressStatusSpec{Address: prefix, LinkName: ExternalLink, Family: family, Scope: nethelpers.ScopeGlobal}

			return nil
		}); err != nil {
			return fmt.Errorf("writing the external address %s: %w", ip, err)
		}
	}

	<-ctx.Done()

	return nil
}
