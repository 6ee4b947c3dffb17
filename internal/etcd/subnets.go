package etcd

import (
	"fmt"
	"net/netip"
	"slices"

	sideronet "github.com/siderolabs/net"
)

// Endpoints are the addresses etcd advertises (its peer and client URLs in the member list)
// and listens on.
type Endpoints struct {
	Advertise    []netip.Addr
	ListenPeer   []netip.Addr
	ListenClient []netip.Addr
}

// EndpointsInput is what the addresses are chosen from.
type EndpointsInput struct {
	// Address is the node's address: advertised, and listened on, when no subnet is set.
	Address netip.Addr
	// Addresses are the node's other addresses (routed ones); Address is always a candidate.
	Addresses []netip.Addr
	// AdvertisedSubnets and ListenSubnets are cluster.etcd's, as the config returns them
	// (listenSubnets defaults to advertisedSubnets there): CIDRs or addresses, a leading "!"
	// excluding, applied in order as upstream's filter does.
	AdvertisedSubnets, ListenSubnets []string
	// Exclude are never advertised (virtual IPs: they move between nodes).
	Exclude []string
	// Loopback: clients may also connect on 127.0.0.1 (kube-apiserver does), a node with its own
	// network namespace.
	Loopback bool
}

// SelectEndpoints chooses etcd's addresses as upstream's etcd spec does: with advertisedSubnets
// every node address in them (less the excluded) is advertised; with listenSubnets etcd listens
// for peers on the node addresses in them, and for clients on those and loopback. Without them
// the node's address is advertised and listened on (upstream listens on every address there; a
// process-mode node shares the host's network with other nodes, so ours stays on its own).
// A subnet list that matches no address is an error naming the field: etcd cannot start.
func SelectEndpoints(in EndpointsInput) (Endpoints, error) {
	candidates := []netip.Addr{}
	if in.Address.IsValid() {
		candidates = append(candidates, in.Address.Unmap())
	}

	for _, a := range in.Addresses {
		if a = a.Unmap(); a.IsValid() && !slices.Contains(candidates, a) {
			candidates = append(candidates, a)
		}
	}

	if len(candidates) == 0 {
		return Endpoints{}, fmt.Errorf("etcd: the node has no address yet")
	}

	var (
		out Endpoints
		err error
	)

	if len(in.AdvertisedSubnets) == 0 {
		out.Advertise = candidates[:1]
	} else if out.Advertise, err = filter(candidates, in.AdvertisedSubnets, in.Exclude, "advertisedSubnets"); err != nil {
		return Endpoints{}, err
	}

	if len(in.ListenSubnets) == 0 {
		out.ListenPeer = slices.Clone(out.Advertise)
	} else if out.ListenPeer, err = filter(candidates, in.ListenSubnets, nil, "listenSubnets"); err != nil {
		return Endpoints{}, err
	}

	out.ListenClient = slices.Clone(out.ListenPeer)

	if in.Loopback {
		lo := netip.MustParseAddr("127.0.0.1")
		if !slices.Contains(out.ListenClient, lo) {
			out.ListenClient = append(out.ListenClient, lo)
		}
	}

	return out, nil
}

// filter keeps the addresses the subnets select, the excluded ones removed after them.
func filter(addrs []netip.Addr, subnets, exclude []string, field string) ([]netip.Addr, error) {
	cidrs := slices.Clone(subnets)
	for _, e := range exclude {
		cidrs = append(cidrs, "!"+e)
	}

	out, err := sideronet.FilterIPs(addrs, cidrs)
	if err != nil {
		return nil, fmt.Errorf("cluster.etcd.%s %v: %w (give CIDRs or addresses, \"!\" before one to exclude it)", field, subnets, err)
	}

	if len(out) == 0 {
		return nil, fmt.Errorf("cluster.etcd.%s %v match none of the node's addresses %v: etcd does not start until one does (change the subnets to include one of these addresses)",
			field, subnets, addrs)
	}

	return out, nil
}

// urls are the URLs of addrs on port.
func urls(addrs []netip.Addr, port int, mk func(string, int) string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, mk(a.String(), port))
	}

	return out
}
