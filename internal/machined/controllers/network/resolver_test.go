package network_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/machined/hostdns"
	"github.com/talos-go/talos/internal/testenv"
)

// A real DNS server on 127.0.0.2:53 stands for the node's resolver: it answers every A query
// with 192.0.2.7.
func serveUpstream(t *testing.T) {
	t.Helper()

	l, err := hostdns.Listen(netip.MustParseAddrPort("127.0.0.2:53"), dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, 7)}}
		w.WriteMsg(m)
	}))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
}

func lookup(addr, name string) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)

	resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, addr)

	return resp, err
}

func hostDNSConfig(t *testing.T, enabled, forward bool) func(*v1alpha1.Config) {
	t.Helper()

	return func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NameServers: []string{"127.0.0.2"}}
		c.MachineConfig.MachineFeatures.HostDNSSupport = &v1alpha1.HostDNSConfig{HostDNSEnabled: new(enabled), HostDNSForwardKubeDNSToHost: new(forward)}
	}
}

// readFile is the file's content, or "" before the controller has written it (the waits poll).
func readFile(t *testing.T, path string) string {
	t.Helper()

	data, _ := os.ReadFile(path)

	return string(data)
}

// TestResolverHostDNS: with machine.features.hostDNS the node's lookups go through the host
// DNS on 127.0.0.53 and the pods' through 169.254.116.108, both to the configured resolver;
// disabled, both resolv.conf files name the resolver itself and nothing listens.
func TestResolverHostDNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root in a network namespace of its own (port 53 and an address on lo)")
	}

	serveUpstream(t)

	root := t.TempDir()
	hostConf, podConf := filepath.Join(root, networkctrl.HostResolvConf), filepath.Join(root, networkctrl.PodResolvConf)
	env := ctest.Start(t, &networkctrl.ResolverController{Root: root})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, hostDNSConfig(t, true, true)))

	ctest.AssertResource(env, network.HostDNSConfigID, func(r *network.HostDNSConfig, a *assert.Assertions) {
		a.True(r.TypedSpec().Enabled)
		a.Equal([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.53:53"), netip.MustParseAddrPort("169.254.116.108:53")}, r.TypedSpec().ListenAddresses)
		a.Equal("169.254.116.108", r.TypedSpec().ServiceHostDNSAddress.String())
	})
	ctest.AssertResource(env, network.ResolverID, func(r *network.ResolverStatus, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("127.0.0.2")}, r.TypedSpec().DNSServers)
	})
	ctest.AssertIDs[*network.DNSResolveCache](env, "tcp-127.0.0.53:53", "tcp-169.254.116.108:53", "udp-127.0.0.53:53", "udp-169.254.116.108:53")
	ctest.AssertIDs[*network.DNSUpstream](env, "127.0.0.2:53")

	testenv.WaitFor(t, "the resolv.conf files", 10*time.Second, func() error {
		if h, p := readFile(t, hostConf), readFile(t, podConf); h != "nameserver 127.0.0.53\n" || p != "nameserver 169.254.116.108\n" {
			return fmt.Errorf("host %q, pods %q", h, p)
		}

		return nil
	})

	for _, addr := range []string{"127.0.0.53:53", "169.254.116.108:53"} {
		resp, err := lookup(addr, "anything.example.")
		require.NoError(t, err, addr)
		require.Len(t, resp.Answer, 1, addr)
		require.Equal(t, "192.0.2.7", resp.Answer[0].(*dns.A).A.String(), addr)
	}

	// The node's resolv.conf is rewritten in place: a bind mount of it sees the change.
	before, err := os.Stat(hostConf)
	require.NoError(t, err)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, hostDNSConfig(t, false, false)))

	testenv.WaitFor(t, "the resolv.conf files naming the resolver", 10*time.Second, func() error {
		if h, p := readFile(t, hostConf), readFile(t, podConf); h != "nameserver 127.0.0.2\n" || p != h {
			return fmt.Errorf("host %q, pods %q", h, p)
		}

		return nil
	})

	after, err := os.Stat(hostConf)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "resolv.conf was replaced, not rewritten")

	ctest.AssertIDs[*network.DNSResolveCache](env)
	ctest.AssertIDs[*network.DNSUpstream](env)
	ctest.AssertResource(env, network.HostDNSConfigID, func(r *network.HostDNSConfig, a *assert.Assertions) {
		a.False(r.TypedSpec().Enabled)
	})

	_, err = lookup("127.0.0.53:53", "anything.example.")
	require.Error(t, err, "the host DNS still answers once disabled")
}

// A node whose config names no resolvers uses the DHCP leases' (the operator layer's resolver
// specs) before upstream's defaults; the config's win over both.
func TestResolverFromTheLease(t *testing.T) {
	root := t.TempDir()
	env := ctest.Start(t, &networkctrl.ResolverController{Root: root})

	noHostDNS := func(c *v1alpha1.Config) {
		c.MachineConfig.MachineFeatures.HostDNSSupport = &v1alpha1.HostDNSConfig{HostDNSEnabled: new(false)}
	}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, noHostDNS))

	servers := func(want ...string) {
		t.Helper()

		ctest.AssertResource(env, network.ResolverID, func(r *network.ResolverStatus, a *assert.Assertions) {
			var got []string
			for _, s := range r.TypedSpec().DNSServers {
				got = append(got, s.String())
			}

			a.Equal(want, got)
		})
	}

	servers("1.1.1.1", "8.8.8.8")

	lease := network.NewResolverSpec(network.NamespaceName, "operator/dhcp4/eth0")
	lease.TypedSpec().DNSServers = []netip.Addr{netip.MustParseAddr("10.9.5.53")}
	lease.TypedSpec().ConfigLayer = network.ConfigOperator
	env.Create(lease)

	servers("10.9.5.53")

	testenv.WaitFor(t, "resolv.conf naming the lease's resolver", 10*time.Second, func() error {
		if h := readFile(t, filepath.Join(root, networkctrl.HostResolvConf)); h != "nameserver 10.9.5.53\n" {
			return fmt.Errorf("resolv.conf %q", h)
		}

		return nil
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, noHostDNS, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NameServers: []string{"10.9.9.9"}}
	}))

	servers("10.9.9.9")
}
