package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// NodeIPController publishes the node's Kubernetes IPs (kubelet's --node-ip).
type NodeIPController = transform.Controller[*k8s.NodeIPConfig, *k8s.NodeIP]

// NewNodeIPController declares NodeIP: of the node's addresses (127.0.0.1, ::1 and link-local
// left out; a process-mode node's own 127.5.x.y address stays), the first IPv4 and the first IPv6 in a valid subnet and in no excluded one.
func NewNodeIPController() *NodeIPController {
	return transform.NewController(
		transform.Settings[*k8s.NodeIPConfig, *k8s.NodeIP]{
			Name: "k8s.NodeIPController",
			MapMetadataOptionalFunc: func(c *k8s.NodeIPConfig) optional.Optional[*k8s.NodeIP] {
				if c.Metadata().ID() != k8s.KubeletID {
					return optional.None[*k8s.NodeIP]()
				}

				return optional.Some(k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, c *k8s.NodeIPConfig, out *k8s.NodeIP) error {
				addrs, err := safe.ReaderGetByID[*network.NodeAddress](ctx, r, network.NodeAddressAccumulativeID)
				if err != nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("waiting for the node addresses: %v", err)
				}

				ips, err := ChooseNodeIPs(addrs.TypedSpec().IPs(), c.TypedSpec().ValidSubnets, c.TypedSpec().ExcludeSubnets)
				if err != nil {
					return err
				}

				if len(ips) == 0 {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("no node address in machine.kubelet.nodeIP.validSubnets %v", c.TypedSpec().ValidSubnets)
				}

				out.TypedSpec().Addresses = ips

				return nil
			},
		},
		transform.WithExtraInputs(controller.Input{
			Namespace: network.NamespaceName, Type: network.NodeAddressType, ID: optional.Some(network.NodeAddressAccumulativeID), Kind: controller.InputWeak,
		}),
	)
}

// ChooseNodeIPs picks from addrs the first IPv4 and the first IPv6 address that is in one of
// valid (entries starting with "!" exclude) and in none of exclude.
func ChooseNodeIPs(addrs []netip.Addr, valid, exclude []string) ([]netip.Addr, error) {
	var in, out []netip.Prefix

	for _, s := range valid {
		neg := strings.HasPrefix(s, "!")

		p, err := parseSubnet(strings.TrimPrefix(s, "!"))
		if err != nil {
			return nil, fmt.Errorf("machine.kubelet.nodeIP.validSubnets: %w", err)
		}

		if neg {
			out = append(out, p)
		} else {
			in = append(in, p)
		}
	}

	for _, s := range exclude {
		p, err := parseSubnet(s)
		if err != nil {
			return nil, fmt.Errorf("excluded subnet: %w", err)
		}

		out = append(out, p)
	}

	contains := func(ps []netip.Prefix, a netip.Addr) bool {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}

		return false
	}

	var v4, v6 netip.Addr

	for _, a := range addrs {
		a = a.Unmap()
		if hostLoopback(a) || a.IsLinkLocalUnicast() || !contains(in, a) || contains(out, a) {
			continue
		}

		if a.Is4() && !v4.IsValid() {
			v4 = a
		}

		if a.Is6() && !v6.IsValid() {
			v6 = a
		}
	}

	var ips []netip.Addr

	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			ips = append(ips, a)
		}
	}

	return ips, nil
}

// parseSubnet reads a subnet, or a single address as its own subnet.
func parseSubnet(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}

	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a subnet nor an address", s)
	}

	return netip.PrefixFrom(a, a.BitLen()), nil
}

// hostLoopback is the loopback address every node has; other 127/8 addresses are a
// process-mode node's own.
func hostLoopback(a netip.Addr) bool {
	return a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || a == netip.IPv6Loopback()
}
