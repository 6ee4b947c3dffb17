package cluster_test

import (
	"net/netip"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/rtestutils"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/stretchr/testify/assert"

	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

func rawNamespace() rtestutils.Option { return rtestutils.WithNamespace(cluster.RawNamespaceName) }

func rawAffiliate(id string, spec cluster.AffiliateSpec) *cluster.Affiliate {
	res := cluster.NewAffiliate(cluster.RawNamespaceName, id)
	*res.TypedSpec() = spec

	return res
}

// TestAffiliateMerge: the raw affiliates of every registry (service/, k8s/) become one affiliate
// per node ID with the addresses and KubeSpan endpoints of all (the other fields from the
// last registry by ID that has them), and a member; a raw affiliate with this node's ID is not
// merged; a registry's loss takes its part away, the last one's the affiliate.
func TestAffiliateMerge(t *testing.T) {
	env := ctest.Start(t,
		&clusterctrl.IdentityController{StateDir: t.TempDir()},
		&clusterctrl.AffiliateMergeController{},
		&clusterctrl.MemberController{},
	)

	self := localID(env)

	fromK8s := rawAffiliate("k8s/n1", cluster.AffiliateSpec{
		NodeID: "n1", Hostname: "n1", Nodename: "n1", MachineType: machine.TypeWorker,
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		KubeSpan:  cluster.KubeSpanAffiliateSpec{PublicKey: "key", Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:51820")}},
	})
	fromService := rawAffiliate(clusterctrl.ServicePrefix+"n1", cluster.AffiliateSpec{
		NodeID: "n1", Hostname: "n1.example", Nodename: "n1", MachineType: machine.TypeWorker, OperatingSystem: "Talos (v1.11.0)",
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.0.2.1")},
		KubeSpan:  cluster.KubeSpanAffiliateSpec{PublicKey: "key", Endpoints: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:51820")}},
	})
	echo := rawAffiliate(clusterctrl.ServicePrefix+self, cluster.AffiliateSpec{NodeID: self, Hostname: "impostor", Nodename: "impostor"})

	env.Create(fromK8s, fromService, echo)

	ctest.AssertResource(env, "n1", func(r *cluster.Affiliate, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal("n1.example", spec.Hostname)
		a.Equal([]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.0.2.1")}, spec.Addresses)
		a.Equal([]netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:51820"), netip.MustParseAddrPort("192.0.2.1:51820")}, spec.KubeSpan.Endpoints)
	})
	ctest.AssertIDs[*cluster.Affiliate](env, "n1")
	ctest.AssertIDs[*cluster.Member](env, "n1")

	env.Destroy(fromService)
	ctest.AssertResource(env, "n1", func(r *cluster.Affiliate, a *assert.Assertions) {
		a.Equal("n1", r.TypedSpec().Hostname)
		a.Equal([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, r.TypedSpec().Addresses)
	})

	env.Destroy(fromK8s)
	ctest.AssertIDs[*cluster.Affiliate](env)
	ctest.AssertIDs[*cluster.Member](env)
}
