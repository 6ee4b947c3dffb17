package network_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// privateNetNS skips the test unless it runs as root in a network namespace of its own (nsrun
// gives one with only lo): the test adds links, and must not touch a shared namespace.
func privateNetNS(t *testing.T) *rtnetlink.Conn {
	t.Helper()

	if os.Getuid() != 0 {
		t.Skip("needs root to add links: run as root under nsrun")
	}

	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	links, err := conn.Link.List()
	if err != nil {
		t.Fatal(err)
	}

	for _, l := range links {
		if l.Attributes.Name != "lo" {
			t.Skipf("the network namespace has %s: run under nsrun, which gives a private one", l.Attributes.Name)
		}
	}

	return conn
}

// TestNetlinkStatus adds a veth pair and addresses in the test's private namespace and
// watches links, addresses, routes and node addresses follow, then removes an address.
func TestNetlinkStatus(t *testing.T) {
	conn := privateNetNS(t)
	env := ctest.Start(t,
		&networkctrl.LinkStatusController{},
		&networkctrl.AddressStatusController{},
		&networkctrl.RouteStatusController{},
		&networkctrl.NodeAddressController{},
	)

	// Before: lo only, and no node address (loopback is not one).
	ctest.AssertResources(env, []string{"lo"}, func(r *network.LinkStatus, a *assert.Assertions) {
		a.Equal(nethelpers.LinkLoopbck, r.TypedSpec().Type)
	})
	ctest.AssertResources(env, []string{network.NodeAddressCurrentID}, func(r *network.NodeAddress, a *assert.Assertions) {
		a.Empty(r.TypedSpec().Addresses)
	})

	if err := conn.Link.New(&rtnetlink.LinkMessage{
		Family:     unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: "node0", MTU: 1400, Info: &rtnetlink.LinkInfo{Kind: "veth", Data: &driver.Veth{PeerInfo: &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: "peer0"}}}}},
	}); err != nil {
		t.Fatalf("adding a veth pair: %v", err)
	}

	node0 := linkIndex(t, conn, "node0")

	for _, name := range []string{"node0", "peer0"} {
		if err := conn.Link.Set(&rtnetlink.LinkMessage{Index: linkIndex(t, conn, name), Flags: unix.IFF_UP, Change: unix.IFF_UP}); err != nil {
			t.Fatal(err)
		}
	}

	v4, v6 := netip.MustParsePrefix("10.5.0.2/24"), netip.MustParsePrefix("fd00:5::2/64")
	for _, p := range []netip.Prefix{v4, v6} {
		addAddress(t, conn, node0, p)
	}

	ctest.AssertResources(env, []string{"node0"}, func(r *network.LinkStatus, a *assert.Assertions) {
		a.Equal("veth", r.TypedSpec().Kind)
		a.EqualValues(1400, r.TypedSpec().MTU)
		a.Equal(node0, r.TypedSpec().Index)
		a.True(r.TypedSpec().Flags&nethelpers.LinkFlags(nethelpers.LinkUp) != 0, "up")
		a.Len(r.TypedSpec().HardwareAddr, 6)
	})
	ctest.AssertResources(env, []string{network.AddressID("node0", v4), network.AddressID("node0", v6)}, func(r *network.AddressStatus, a *assert.Assertions) {
		a.Equal("node0", r.TypedSpec().LinkName)
		a.Equal(node0, r.TypedSpec().LinkIndex)
		a.Equal(nethelpers.ScopeGlobal, r.TypedSpec().Scope)
	})

	// The kernel's prefix route for the new address, in the main table.
	routeID := network.RouteID(nethelpers.TableMain, nethelpers.FamilyInet4, v4.Masked(), netip.Addr{}, 0, "node0")
	ctest.AssertResources(env, []string{routeID}, func(r *network.RouteStatus, a *assert.Assertions) {
		a.Equal(netip.MustParseAddr("10.5.0.2"), r.TypedSpec().Source)
		a.Equal(nethelpers.ProtocolKernel, r.TypedSpec().Protocol)
		a.Equal(node0, r.TypedSpec().OutLinkIndex)
	})

	ctest.AssertResources(env, []string{network.NodeAddressCurrentID, network.NodeAddressDefaultID}, func(r *network.NodeAddress, a *assert.Assertions) {
		want := []netip.Prefix{v4, v6}
		if r.Metadata().ID() == network.NodeAddressDefaultID {
			want = want[:1]
		}

		a.Equal(want, r.TypedSpec().Addresses)
	})

	// An address removed goes from the statuses and from current, not from accumulative.
	if err := conn.Address.Delete(addressMessage(node0, v4)); err != nil {
		t.Fatal(err)
	}

	ctest.AssertNoResource[*network.AddressStatus](env, network.AddressID("node0", v4))
	ctest.AssertNoResource[*network.RouteStatus](env, routeID)
	ctest.AssertResources(env, []string{network.NodeAddressCurrentID, network.NodeAddressAccumulativeID}, func(r *network.NodeAddress, a *assert.Assertions) {
		want := []netip.Prefix{v6}
		if r.Metadata().ID() == network.NodeAddressAccumulativeID {
			want = []netip.Prefix{v4, v6}
		}

		a.Equal(want, r.TypedSpec().Addresses)
	})

	// A deleted link goes, with its peer.
	if err := conn.Link.Delete(node0); err != nil {
		t.Fatal(err)
	}

	ctest.AssertNoResource[*network.LinkStatus](env, "node0")
	ctest.AssertNoResource[*network.LinkStatus](env, "peer0")
}

func TestResolverStatus(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")

	writeFile(t, path, "# written by a test\nnameserver 10.5.0.1\nnameserver fd00:5::1\nnameserver bogus\nsearch a.example b.example\n")

	env := ctest.Start(t, &networkctrl.ResolverStatusController{Path: path})

	ctest.AssertResources(env, []string{network.ResolverID}, func(r *network.ResolverStatus, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.1"), netip.MustParseAddr("fd00:5::1")}, r.TypedSpec().DNSServers)
		a.Equal([]string{"a.example", "b.example"}, r.TypedSpec().SearchDomains)
	})

	// Replaced by a rename, as resolvers write it.
	writeFile(t, path+".new", "nameserver 10.5.0.9\n")

	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}

	ctest.AssertResources(env, []string{network.ResolverID}, func(r *network.ResolverStatus, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("10.5.0.9")}, r.TypedSpec().DNSServers)
		a.Empty(r.TypedSpec().SearchDomains)
	})

	// No resolv.conf: no name servers, and nothing made up.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	ctest.AssertResources(env, []string{network.ResolverID}, func(r *network.ResolverStatus, a *assert.Assertions) {
		a.Empty(r.TypedSpec().DNSServers)
	})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()

	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func linkIndex(t *testing.T, conn *rtnetlink.Conn, name string) uint32 {
	t.Helper()

	links, err := conn.Link.List()
	if err != nil {
		t.Fatal(err)
	}

	i := slices.IndexFunc(links, func(l rtnetlink.LinkMessage) bool { return l.Attributes.Name == name })
	if i < 0 {
		t.Fatalf("no link %s", name)
	}

	return links[i].Index
}

func addressMessage(index uint32, p netip.Prefix) *rtnetlink.AddressMessage {
	family := uint8(unix.AF_INET6)
	if p.Addr().Is4() {
		family = unix.AF_INET
	}

	ip := net.IP(p.Addr().AsSlice())

	return &rtnetlink.AddressMessage{
		Family: family, PrefixLength: uint8(p.Bits()), Index: index,
		Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip},
	}
}

func addAddress(t *testing.T, conn *rtnetlink.Conn, index uint32, p netip.Prefix) {
	t.Helper()

	m := addressMessage(index, p)
	m.Flags = unix.IFA_F_NODAD // no duplicate detection: usable at once

	if err := conn.Address.New(m); err != nil {
		t.Fatalf("adding %s: %v", p, err)
	}
}

// TestSetKernelHostname sets the hostname in a UTS namespace of the test's own (on a thread
// that ends with the test): what a node with its own namespaces does.
func TestSetKernelHostname(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for a UTS namespace")
	}

	got := make(chan string, 1)

	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its namespace end with the goroutine

		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			got <- "unshare: " + err.Error()

			return
		}

		if err := networkctrl.SetKernelHostname("node-7", "example.test"); err != nil {
			got <- err.Error()

			return
		}

		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			got <- err.Error()

			return
		}

		got <- unix.ByteSliceToString(u.Nodename[:]) + " " + unix.ByteSliceToString(u.Domainname[:])
	}()

	if g := <-got; g != "node-7 example.test" {
		t.Errorf("uname after SetKernelHostname: %s", g)
	}
}
