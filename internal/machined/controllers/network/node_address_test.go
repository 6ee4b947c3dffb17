package network_test

import (
	"net/netip"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

func TestStaticNodeAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, prefix string
	}{
		{"127.5.0.2", "127.5.0.2/32"},
		{"fd00::5", "fd00::5/128"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			env := ctest.Start(t, &networkctrl.NodeAddressController{Static: []netip.Addr{netip.MustParseAddr(tc.addr)}})

			// A process-mode node: every ID a consumer looks for carries its one loopback
			// address, as a host prefix.
			ids := []resource.ID{
				network.NodeAddressAccumulativeID, network.NodeAddressCurrentID,
				network.NodeAddressDefaultID, network.NodeAddressRoutedID,
			}

			ctest.AssertResources(env, ids, func(r *network.NodeAddress, a *assert.Assertions) {
				a.Equal([]netip.Prefix{netip.MustParsePrefix(tc.prefix)}, r.TypedSpec().Addresses)
				a.Equal([]netip.Addr{netip.MustParseAddr(tc.addr)}, r.TypedSpec().IPs())
			})
			ctest.AssertIDs[*network.NodeAddress](env, ids...)
		})
	}
}
