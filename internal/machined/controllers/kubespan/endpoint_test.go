package kubespan_test

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	kubespanctrl "github.com/talos-go/talos/internal/machined/controllers/kubespan"
)

// TestHarvestedEndpoints: with harvestExtraEndpoints, each peer that is up gives the endpoint it
// was reached at, for its affiliate's node ID; a peer that is not up, or of no affiliate, gives
// none; the option off withdraws them all.
func TestHarvestedEndpoints(t *testing.T) {
	env := ctest.Start(t, &kubespanctrl.EndpointController{})

	cfg := kubespan.NewConfig(config.NamespaceName, kubespan.ConfigID)
	cfg.TypedSpec().Enabled, cfg.TypedSpec().HarvestExtraEndpoints = true, true

	affiliate := func(id, key string) *cluster.Affiliate {
		a := cluster.NewAffiliate(cluster.NamespaceName, id)
		a.TypedSpec().NodeID, a.TypedSpec().KubeSpan.PublicKey = id, key

		return a
	}

	status := func(key string, state kubespan.PeerState, ep string) *kubespan.PeerStatus {
		s := kubespan.NewPeerStatus(kubespan.NamespaceName, key)
		s.TypedSpec().State, s.TypedSpec().Endpoint = state, netip.MustParseAddrPort(ep)

		return s
	}

	env.Create(cfg, affiliate("node-a", "key-a"), affiliate("node-b", "key-b"),
		status("key-a", kubespan.PeerStateUp, "192.0.2.1:40000"),
		status("key-b", kubespan.PeerStateDown, "192.0.2.2:51820"),
		status("key-stranger", kubespan.PeerStateUp, "192.0.2.3:51820"))

	ctest.AssertResource(env, "key-a", func(r *kubespan.Endpoint, a *assert.Assertions) {
		a.Equal("node-a", r.TypedSpec().AffiliateID)
		a.Equal(netip.MustParseAddrPort("192.0.2.1:40000"), r.TypedSpec().Endpoint)
	})
	ctest.AssertIDs[*kubespan.Endpoint](env, "key-a")

	ctest.Update(env, cfg, func(r *kubespan.Config) error {
		r.TypedSpec().HarvestExtraEndpoints = false

		return nil
	})
	ctest.AssertIDs[*kubespan.Endpoint](env)
}
