package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// NodeAddressController publishes the node's addresses under the NodeAddress IDs consumers
// look for (default, current, routed, accumulative). A node in its own network namespace
// takes them from AddressStatus: global unicast addresses of links that are not loopback; the
// platform's external addresses (link "external", ExternalAddressController) are current and
// accumulative but, as upstream, neither routed (no packet reaches them on a link of the node)
// nor the default. A
// process-mode node shares the host's namespace and is reached on the one loopback address it
// is bound to: Static holds it, and the address statuses are not consulted. The addresses are
// in the order of NodeAddressSortAlgorithm (v1 without one).
type NodeAddressController struct {
	Static []netip.Addr
}

// Name implements controller.Controller.
func (ctrl *NodeAddressController) Name() string { return "network.NodeAddressController" }

// Inputs implements controller.Controller.
func (ctrl *NodeAddressController) Inputs() []controller.Input {
	sortAlgorithm := controller.Input{
		Namespace: network.NamespaceName, Type: network.NodeAddressSortAlgorithmType,
		ID: optional.Some(network.NodeAddressSortAlgorithmID), Kind: controller.InputWeak,
	}

	if len(ctrl.Static) > 0 {
		return []controller.Input{sortAlgorithm}
	}

	return []controller.Input{
		{Namespace: network.NamespaceName, Type: network.AddressStatusType, Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.LinkStatusType, Kind: controller.InputWeak},
		sortAlgorithm,
	}
}

// Outputs implements controller.Controller.
func (ctrl *NodeAddressController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.NodeAddressType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *NodeAddressController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	var seen []netip.Prefix // every address ever current: the accumulative set

	for {
		algorithm := nethelpers.AddressSortAlgorithmV1

		sa, err := safe.ReaderGetByID[*network.NodeAddressSortAlgorithm](ctx, r, network.NodeAddressSortAlgorithmID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading the address sort algorithm: %w", err)
		}

		if sa != nil {
			algorithm = sa.TypedSpec().Algorithm
		}

		compare := compareFor(algorithm)

		current := make([]netip.Prefix, 0, len(ctrl.Static))
		for _, a := range ctrl.Static {
			current = append(current, netip.PrefixFrom(a, a.BitLen()))
		}

		routed := current

		if len(ctrl.Static) == 0 {
			if current, routed, err = ctrl.fromStatus(ctx, r, compare); err != nil {
				return err
			}
		}

		for _, p := range current {
			if !slices.Contains(seen, p) {
				seen = append(seen, p)
			}
		}

		slices.SortFunc(seen, compare)

		var def []netip.Prefix
		if len(routed) > 0 {
			def = routed[:1]
		}

		for id, addrs := range map[string][]netip.Prefix{
			network.NodeAddressDefaultID:      def,
			network.NodeAddressCurrentID:      current,
			network.NodeAddressRoutedID:       routed,
			network.NodeAddressAccumulativeID: seen,
		} {
			if err := safe.WriterModify(ctx, r, network.NewNodeAddress(network.NamespaceName, id), func(res *network.NodeAddress) error {
				res.TypedSpec().Addresses = slices.Clone(addrs)
				res.TypedSpec().SortAlgorithm = algorithm

				return nil
			}); err != nil {
				return fmt.Errorf("writing node address %s: %w", id, err)
			}
		}

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}
	}
}

// fromStatus lists the global unicast addresses of the links that are not loopback, in the
// order of compare: current with the platform's external addresses, routed without them.
func (ctrl *NodeAddressController) fromStatus(ctx context.Context, r controller.Runtime, compare func(a, b netip.Prefix) int) (current, routed []netip.Prefix, err error) {
	links, err := safe.ReaderListAll[*network.LinkStatus](ctx, r)
	if err != nil {
		return nil, nil, fmt.Errorf("listing links: %w", err)
	}

	loopback := map[uint32]bool{}

	for l := range links.All() {
		if l.TypedSpec().Type == nethelpers.LinkLoopbck {
			loopback[l.TypedSpec().Index] = true
		}
	}

	addrs, err := safe.ReaderListAll[*network.AddressStatus](ctx, r)
	if err != nil {
		return nil, nil, fmt.Errorf("listing addresses: %w", err)
	}

	for a := range addrs.All() {
		spec := a.TypedSpec()
		ip := spec.Address.Addr()

		// The KubeSpan address is the tunnel's: the node is not reached there from outside it.
		if loopback[spec.LinkIndex] || !ip.IsGlobalUnicast() || spec.Scope != nethelpers.ScopeGlobal || spec.LinkName == constants.KubeSpanLinkName {
			continue
		}

		current = append(current, spec.Address)

		if spec.LinkName != ExternalLink {
			routed = append(routed, spec.Address)
		}
	}

	slices.SortFunc(current, compare)
	slices.SortFunc(routed, compare)

	return slices.Compact(current), slices.Compact(routed), nil
}
