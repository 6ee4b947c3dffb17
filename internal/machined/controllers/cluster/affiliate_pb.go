package cluster

import (
	"net/netip"

	clientpb "github.com/siderolabs/discovery-api/api/v1alpha1/client/pb"
	discoveryclient "github.com/siderolabs/discovery-client/pkg/client"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
)

// The discovery service's wire form of an affiliate (discovery-api's client protobuf, which the
// service sees only encrypted): addresses as netip's binary form (4 or 16 bytes), the
// machine type as its name, and the KubeSpan endpoints beside the affiliate, each encrypted
// on its own so that the service can merge the endpoints several nodes report.

// toProto is a local affiliate as the discovery client sends it: the affiliate and its
// KubeSpan endpoints (none without KubeSpan).
func toProto(spec *cluster.AffiliateSpec) *discoveryclient.Affiliate {
	a := &clientpb.Affiliate{
		NodeId:          spec.NodeID,
		Hostname:        spec.Hostname,
		Nodename:        spec.Nodename,
		MachineType:     spec.MachineType.String(),
		OperatingSystem: spec.OperatingSystem,
	}

	for _, addr := range spec.Addresses {
		a.Addresses = append(a.Addresses, addrBytes(addr))
	}

	if spec.ControlPlane != nil {
		a.ControlPlane = &clientpb.ControlPlane{ApiServerPort: uint32(spec.ControlPlane.APIServerPort)}
	}

	if spec.KubeSpan.PublicKey == "" {
		return &discoveryclient.Affiliate{Affiliate: a}
	}

	a.Kubespan = &clientpb.KubeSpan{PublicKey: spec.KubeSpan.PublicKey, Address: addrBytes(spec.KubeSpan.Address)}

	for _, p := range spec.KubeSpan.AdditionalAddresses {
		a.Kubespan.AdditionalAddresses = append(a.Kubespan.AdditionalAddresses, &clientpb.IPPrefix{Ip: addrBytes(p.Addr()), Bits: uint32(p.Bits())})
	}

	out := &discoveryclient.Affiliate{Affiliate: a}

	for _, ep := range spec.KubeSpan.Endpoints {
		out.Endpoints = append(out.Endpoints, endpointProto(ep))
	}

	return out
}

// otherEndpoints are the endpoints this node's KubeSpan reached other nodes at
// (harvestExtraEndpoints), which the service adds to those nodes' own.
func otherEndpoints(list []*kubespan.EndpointSpec) []discoveryclient.Endpoint {
	var out []discoveryclient.Endpoint

	for _, e := range list {
		out = append(out, discoveryclient.Endpoint{AffiliateID: e.AffiliateID, Endpoints: []*clientpb.Endpoint{endpointProto(e.Endpoint)}})
	}

	return out
}

// fromProto is an affiliate the discovery service returned, with the endpoints it merged;
// what does not parse is left out (an unknown machine type is TypeUnknown).
func fromProto(a *clientpb.Affiliate, endpoints []*clientpb.Endpoint) cluster.AffiliateSpec {
	spec := cluster.AffiliateSpec{
		NodeID:          a.NodeId,
		Hostname:        a.Hostname,
		Nodename:        a.Nodename,
		OperatingSystem: a.OperatingSystem,
	}

	spec.MachineType, _ = machine.ParseType(a.MachineType) // TypeUnknown on error

	for _, b := range a.Addresses {
		if addr, ok := parseAddr(b); ok {
			spec.Addresses = append(spec.Addresses, addr)
		}
	}

	if a.ControlPlane != nil {
		spec.ControlPlane = &cluster.ControlPlane{APIServerPort: int(a.ControlPlane.ApiServerPort)}
	}

	if a.Kubespan == nil {
		return spec
	}

	spec.KubeSpan.PublicKey = a.Kubespan.PublicKey
	spec.KubeSpan.Address, _ = parseAddr(a.Kubespan.Address)

	for _, p := range a.Kubespan.AdditionalAddresses {
		if addr, ok := parseAddr(p.Ip); ok && p.Bits <= uint32(addr.BitLen()) {
			spec.KubeSpan.AdditionalAddresses = append(spec.KubeSpan.AdditionalAddresses, netip.PrefixFrom(addr, int(p.Bits)))
		}
	}

	for _, ep := range endpoints {
		if addr, ok := parseAddr(ep.Ip); ok && ep.Port > 0 && ep.Port <= 65535 {
			spec.KubeSpan.Endpoints = append(spec.KubeSpan.Endpoints, netip.AddrPortFrom(addr, uint16(ep.Port)))
		}
	}

	return spec
}

func endpointProto(ep netip.AddrPort) *clientpb.Endpoint {
	return &clientpb.Endpoint{Ip: addrBytes(ep.Addr()), Port: uint32(ep.Port())}
}

func addrBytes(addr netip.Addr) []byte {
	b, _ := addr.MarshalBinary() // never fails

	return b
}

func parseAddr(b []byte) (netip.Addr, bool) {
	var addr netip.Addr

	if err := addr.UnmarshalBinary(b); err != nil || !addr.IsValid() {
		return netip.Addr{}, false
	}

	return addr, true
}
