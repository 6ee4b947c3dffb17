package kubespan_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/go-pointer"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	kubespanctrl "github.com/talos-go/talos/internal/machined/controllers/kubespan"
)

func enableKubeSpan(c *v1alpha1.Config) {
	c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkKubeSpan: &v1alpha1.NetworkKubeSpan{KubeSpanEnabled: pointer.To(true)}}
}

func link(name, mac string) *network.LinkStatus {
	l := network.NewLinkStatus(network.NamespaceName, name)
	hw, _ := net.ParseMAC(mac)
	l.TypedSpec().Type, l.TypedSpec().HardwareAddr = nethelpers.LinkEther, nethelpers.HardwareAddr(hw)

	return l
}

// The KubeSpan address: the cluster's ULA prefix for KubeSpan and the MAC's modified EUI-64.
func TestAddress(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	subnet, addr := kubespanctrl.Address("cluster-1", mac)

	if subnet != network.ULAPrefix("cluster-1", network.ULAKubeSpan) || subnet.Bits() != 64 || !subnet.Contains(addr.Addr()) || addr.Bits() != 128 {
		t.Fatalf("subnet %s, address %s", subnet, addr)
	}

	if b := addr.Addr().As16(); b[8] != 0x50 || b[11] != 0xff || b[12] != 0xfe || b[15] != 0x56 {
		t.Fatalf("interface identifier of %s: %x", addr, b[8:])
	}

	if other, _ := kubespanctrl.Address("cluster-2", mac); other == subnet {
		t.Fatal("two clusters share a KubeSpan network")
	}
}

// KubeSpan enabled: the config is published, the identity made from the first physical link's
// MAC, its key kept on STATE (0600) and the same after a restart; disabled: both go.
func TestConfigAndIdentity(t *testing.T) {
	dir := t.TempDir()
	env := ctest.Start(t, kubespanctrl.NewConfigController(), &kubespanctrl.IdentityController{StateDir: dir})

	mc := ctest.MachineConfig(t, machine.TypeWorker, enableKubeSpan)
	env.Create(link("eth1", "52:54:00:00:00:02"), link("eth0", "52:54:00:00:00:01"), mc)

	ctest.AssertResource(env, kubespan.ConfigID, func(r *kubespan.Config, a *assert.Assertions) {
		a.True(r.TypedSpec().Enabled)
		a.Equal(mc.Config().Cluster().ID(), r.TypedSpec().ClusterID)
		a.True(r.TypedSpec().ForceRouting)
		a.EqualValues(constants.KubeSpanLinkMTU, r.TypedSpec().MTU)
	})

	mac, _ := net.ParseMAC("52:54:00:00:00:01")
	_, want := kubespanctrl.Address(mc.Config().Cluster().ID(), mac)

	var key string

	ctest.AssertResource(env, kubespan.LocalIdentity, func(r *kubespan.Identity, a *assert.Assertions) {
		a.Equal(want, r.TypedSpec().Address)
		a.NotEmpty(r.TypedSpec().PublicKey)
		key = r.TypedSpec().PrivateKey
	})

	path := filepath.Join(dir, constants.KubeSpanIdentityFilename)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity on STATE: %v %v", fi, err)
	}

	// A restart (a new runtime on the same STATE) keeps the key.
	env2 := ctest.Start(t, kubespanctrl.NewConfigController(), &kubespanctrl.IdentityController{StateDir: dir})
	env2.Create(link("eth0", "52:54:00:00:00:01"), ctest.MachineConfig(t, machine.TypeWorker, enableKubeSpan))
	ctest.AssertResource(env2, kubespan.LocalIdentity, func(r *kubespan.Identity, a *assert.Assertions) {
		a.Equal(key, r.TypedSpec().PrivateKey)
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	ctest.AssertNoResource[*kubespan.Identity](env, kubespan.LocalIdentity)
	ctest.AssertNoResource[*kubespan.Config](env, kubespan.ConfigID)
}

// Each other affiliate with KubeSpan is a peer: its KubeSpan and node addresses and the pod
// networks it advertises (advertiseKubernetesNetworks) routed to it, its endpoints (filtered)
// tried; this node and affiliates without KubeSpan are not.
func TestPeerSpecs(t *testing.T) {
	env := ctest.Start(t, &kubespanctrl.PeerSpecController{})

	subnet := netip.MustParsePrefix("fd00:1:2:302::/64")
	cfg := kubespan.NewConfig(config.NamespaceName, kubespan.ConfigID)
	cfg.TypedSpec().Enabled, cfg.TypedSpec().EndpointFilters = true, []string{"0.0.0.0/0", "!10.9.0.0/16"}
	cfg.TypedSpec().AdvertiseKubernetesNetworks = true

	self := kubespan.NewIdentity(kubespan.NamespaceName, kubespan.LocalIdentity)
	self.TypedSpec().PublicKey, self.TypedSpec().Subnet, self.TypedSpec().Address = "self-key", subnet, netip.MustParsePrefix("fd00:1:2:302::1/128")

	affiliate := func(id, key, host string, addrs ...string) *cluster.Affiliate {
		a := cluster.NewAffiliate(cluster.NamespaceName, id)
		a.TypedSpec().Hostname = host

		for _, s := range addrs {
			a.TypedSpec().Addresses = append(a.TypedSpec().Addresses, netip.MustParseAddr(s))
			a.TypedSpec().KubeSpan.Endpoints = append(a.TypedSpec().KubeSpan.Endpoints, netip.AddrPortFrom(netip.MustParseAddr(s), 51820))
		}

		if key != "" {
			a.TypedSpec().KubeSpan.PublicKey, a.TypedSpec().KubeSpan.Address = key, netip.MustParseAddr("fd00:1:2:302::"+id)
		}

		return a
	}

	peer := affiliate("2", "peer-key", "cp", "10.5.0.3", "10.9.0.3", "fd00:1:2:302::99")
	peer.TypedSpec().KubeSpan.AdditionalAddresses = []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}

	env.Create(cfg, self, affiliate("1", "self-key", "me", "10.5.0.2"), peer, affiliate("3", "", "legacy", "10.5.0.4"))

	ctest.AssertResource(env, "peer-key", func(r *kubespan.PeerSpec, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("cp", s.Label)
		a.Equal(netip.MustParseAddr("fd00:1:2:302::2"), s.Address)
		a.Equal([]netip.Prefix{
			netip.MustParsePrefix("10.5.0.3/32"), netip.MustParsePrefix("10.9.0.3/32"), netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1:2:302::2/128"),
		}, s.AllowedIPs)
		a.Equal([]netip.AddrPort{netip.MustParseAddrPort("10.5.0.3:51820")}, s.Endpoints)
	})

	ctest.AssertNoResource[*kubespan.PeerSpec](env, "self-key")

	env.Destroy(cfg)
	ctest.AssertNoResource[*kubespan.PeerSpec](env, "peer-key")
}

// Without KubeSpan the manager does nothing, tick after tick (no link, no statuses, and no
// panic: ctest fails the test on one).
func TestManagerIdleWithoutKubeSpan(t *testing.T) {
	env := ctest.Start(t, &kubespanctrl.ManagerController{Interval: 10 * time.Millisecond})

	time.Sleep(300 * time.Millisecond)

	ctest.AssertIDs[*kubespan.PeerStatus](env)

	if _, err := net.InterfaceByName(constants.KubeSpanLinkName); err == nil {
		t.Fatal("a kubespan link without KubeSpan")
	}
}
