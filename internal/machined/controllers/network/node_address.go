package network

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// StaticNodeAddressController publishes the node addresses of a container-mode node: the one
// address it is bound to, under every NodeAddress ID consumers look for.
type StaticNodeAddressController struct {
	Addresses []netip.Addr
}

// Name implements controller.Controller.
func (ctrl *StaticNodeAddressController) Name() string { return "network.StaticNodeAddressController" }

// Inputs implements controller.Controller.
func (ctrl *StaticNodeAddressController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *StaticNodeAddressController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.NodeAddressType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *StaticNodeAddressController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	prefixes := make([]netip.Prefix, 0, len(ctrl.Addresses))
	for _, addr := range ctrl.Addresses {
		prefixes = append(prefixes, netip.PrefixFrom(addr, addr.BitLen()))
	}

	for _, id := range []string{
		network.NodeAddressDefaultID, network.NodeAddressCurrentID,
		network.NodeAddressRoutedID, network.NodeAddressAccumulativeID,
	} {
		if err := safe.WriterModify(ctx, r, network.NewNodeAddress(network.NamespaceName, id), func(res *network.NodeAddress) error {
			res.TypedSpec().Addresses = prefixes
			return nil
		}); err != nil {
			return fmt.Errorf("writing node address %s: %w", id, err)
		}
	}

	<-ctx.Done()

	return nil
}
