package cluster

import (
	"net/netip"
	"testing"

	clientpb "github.com/siderolabs/discovery-api/api/v1alpha1/client/pb"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/stretchr/testify/assert"
)

// TestAffiliateProto: an affiliate survives the discovery service's wire form (its endpoints
// beside it), IPv4 and IPv6 alike; what does not parse is left out; harvested endpoints go to
// the affiliates they were seen for.
func TestAffiliateProto(t *testing.T) {
	spec := cluster.AffiliateSpec{
		NodeID: "n1", Hostname: "cp1.example", Nodename: "cp1", MachineType: machine.TypeControlPlane, OperatingSystem: "Talos (v1.11.0)",
		Addresses:    []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1")},
		ControlPlane: &cluster.ControlPlane{APIServerPort: 6443},
		KubeSpan: cluster.KubeSpanAffiliateSpec{
			PublicKey: "key", Address: netip.MustParseAddr("fd00::1"),
			AdditionalAddresses: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
			Endpoints:           []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:51820"), netip.MustParseAddrPort("[2001:db8::1]:51820")},
		},
	}

	wire := toProto(&spec)
	assert.Equal(t, "controlplane", wire.Affiliate.MachineType)
	assert.Len(t, wire.Endpoints, 2)
	assert.Equal(t, spec, fromProto(wire.Affiliate, wire.Endpoints))

	// Without KubeSpan: no KubeSpan data, no endpoints.
	plain := cluster.AffiliateSpec{NodeID: "n2", Hostname: "w1", Nodename: "w1", MachineType: machine.TypeWorker, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	wire = toProto(&plain)
	assert.Nil(t, wire.Affiliate.Kubespan)
	assert.Empty(t, wire.Endpoints)
	assert.Equal(t, plain, fromProto(wire.Affiliate, wire.Endpoints))

	// Garbage from another version or a broken node: left out, the rest kept.
	odd := fromProto(&clientpb.Affiliate{
		NodeId: "n3", MachineType: "toaster", Addresses: [][]byte{{1, 2, 3}, {10, 0, 0, 3}},
		Kubespan: &clientpb.KubeSpan{PublicKey: "k3", AdditionalAddresses: []*clientpb.IPPrefix{{Ip: []byte{10, 0, 0, 0}, Bits: 33}}},
	}, []*clientpb.Endpoint{{Ip: []byte{10, 0, 0, 3}, Port: 70000}, {Ip: []byte{10, 0, 0, 3}, Port: 51820}})
	assert.Equal(t, machine.TypeUnknown, odd.MachineType)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.3")}, odd.Addresses)
	assert.Empty(t, odd.KubeSpan.AdditionalAddresses)
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.3:51820")}, odd.KubeSpan.Endpoints)

	others := otherEndpoints([]*kubespan.EndpointSpec{{AffiliateID: "n1", Endpoint: netip.MustParseAddrPort("192.0.2.7:40000")}})
	if assert.Len(t, others, 1) && assert.Len(t, others[0].Endpoints, 1) {
		assert.Equal(t, "n1", others[0].AffiliateID)
		assert.Equal(t, uint32(40000), others[0].Endpoints[0].Port)
		assert.Equal(t, []byte{192, 0, 2, 7}, others[0].Endpoints[0].Ip)
	}
}
