package k8s_test

import (
	"net/netip"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// node is what the network controllers publish about a node: its hostname and addresses.
func node(hostname string, addrs ...string) []resource.Resource {
	status := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	status.TypedSpec().Hostname = hostname

	accumulative := network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID)
	for _, a := range addrs {
		p := netip.MustParsePrefix(a + "/24")
		accumulative.TypedSpec().Addresses = append(accumulative.TypedSpec().Addresses, p)
	}

	return []resource.Resource{status, accumulative}
}
