package network_test

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

func TestStatusController(t *testing.T) {
	e := ctest.Start(t, &networkctrl.StatusController{})

	want := func(s network.StatusSpec) {
		t.Helper()
		ctest.AssertResource(e, network.StatusID, func(r *network.Status, a *assert.Assertions) { a.Equal(s, *r.TypedSpec()) })
	}

	want(network.StatusSpec{})

	addrs := network.NewNodeAddress(network.NamespaceName, network.NodeAddressCurrentID)
	addrs.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.5.0.2/24")}
	e.Create(addrs)
	want(network.StatusSpec{AddressReady: true})

	// A route to a subnet is no connectivity; a default route is.
	subnet := network.NewRouteStatus(network.NamespaceName, "eth0/10.5.0.0/24")
	subnet.TypedSpec().Destination = netip.MustParsePrefix("10.5.0.0/24")
	e.Create(subnet)
	want(network.StatusSpec{AddressReady: true})

	e.Create(network.NewRouteStatus(network.NamespaceName, "eth0/default"), network.NewHostnameStatus(network.NamespaceName, network.HostnameID))
	want(network.StatusSpec{AddressReady: true, ConnectivityReady: true, HostnameReady: true})

	e.Create(network.NewResolverStatus(network.NamespaceName, network.ResolverID))
	want(network.StatusSpec{AddressReady: true, ConnectivityReady: true, HostnameReady: true, EtcFilesReady: true})

	e.Destroy(addrs)
	want(network.StatusSpec{ConnectivityReady: true, HostnameReady: true, EtcFilesReady: true})
}
