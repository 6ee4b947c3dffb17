package network

import (
	"cmp"
	"context"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// NodeAddressSortAlgorithmController publishes the order of the node's addresses.
type NodeAddressSortAlgorithmController = transform.Controller[*config.MachineConfig, *network.NodeAddressSortAlgorithm]

// NewNodeAddressSortAlgorithmController declares NodeAddressSortAlgorithm from
// machine.features.nodeAddressSortAlgorithm (v1 when unset). Without a config there is none,
// and NodeAddressController keeps v1.
func NewNodeAddressSortAlgorithmController() *NodeAddressSortAlgorithmController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *network.NodeAddressSortAlgorithm]{
			Name: "network.NodeAddressSortAlgorithmController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*network.NodeAddressSortAlgorithm] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*network.NodeAddressSortAlgorithm]()
				}

				return optional.Some(network.NewNodeAddressSortAlgorithm(network.NamespaceName, network.NodeAddressSortAlgorithmID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *network.NodeAddressSortAlgorithm) error {
				out.TypedSpec().Algorithm = nethelpers.AddressSortAlgorithmV1
				if m := cfg.Config().Machine(); m != nil {
					out.TypedSpec().Algorithm = m.Features().NodeAddressSortAlgorithm()
				}

				return nil
			},
		},
	)
}

// compareFor is the order of addresses of the algorithm: IPv4 before IPv6 in both.
//
//   - v1 orders by address, then prefix length.
//   - v2 (upstream's "prefers more specific prefixes"): the same address with the longer prefix
//     first; of two addresses where only one's prefix holds the other address, the other (the
//     more specific) first; otherwise by address. So on a node with 10.0.0.5/8 and
//     10.5.0.2/24, v1 puts 10.0.0.5 first and v2 10.5.0.2.
func compareFor(algorithm nethelpers.AddressSortAlgorithm) func(a, b netip.Prefix) int {
	if algorithm == nethelpers.AddressSortAlgorithmV2 {
		return compareMoreSpecificFirst
	}

	return compareByAddress
}

// family sorts IPv4 first.
func family(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}

	return 1
}

func compareByAddress(a, b netip.Prefix) int {
	if c := cmp.Compare(family(a), family(b)); c != 0 {
		return c
	}

	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}

	return cmp.Compare(a.Bits(), b.Bits())
}

func compareMoreSpecificFirst(a, b netip.Prefix) int {
	if c := cmp.Compare(family(a), family(b)); c != 0 {
		return c
	}

	if a.Addr() == b.Addr() {
		return cmp.Compare(b.Bits(), a.Bits())
	}

	aHoldsB, bHoldsA := a.Contains(b.Addr()), b.Contains(a.Addr())
	if aHoldsB != bHoldsA {
		if aHoldsB { // b is the more specific
			return 1
		}

		return -1
	}

	return a.Addr().Compare(b.Addr())
}
