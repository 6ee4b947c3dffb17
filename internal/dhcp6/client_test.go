package dhcp6_test

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6/server6"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/dhcp6"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
)

// The tests make a veth pair: as root they run in a network namespace of their own.
func TestMain(m *testing.M) {
	if code, done := netnstest.Isolate(); done {
		os.Exit(code)
	}

	os.Exit(m.Run())
}

// vethPair makes server <-> client, the client's end with mac, both up.
func vethPair(t *testing.T, server, client, mac string) {
	t.Helper()

	for _, args := range [][]string{
		{"link", "add", server, "type", "veth", "peer", "name", client},
		{"link", "set", client, "address", mac},
		{"link", "set", server, "up"},
		{"link", "set", client, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}

	t.Cleanup(func() { exec.Command("ip", "link", "del", server).Run() })
}

// The node's client and the qemu network's server over a real link: the node leases its fixed
// ::N with the name servers, renews (RENEW to the server, REBIND to any) and keeps it; a
// machine the network does not know gets no answer.
func TestLeaseFromQEMUNetwork(t *testing.T) {
	if !netnstest.Own() {
		t.Skip("makes links: run as root (the test runs in a network namespace of its own)")
	}

	vethPair(t, "srv0", "node0", "52:54:00:05:00:02")
	vethPair(t, "srv1", "stranger0", "52:54:00:05:00:09")

	node := netip.MustParseAddr("fd74:616c:a05::2")
	spec := vm.NetworkSpec{
		Bridge: "srv0", Nameservers: []netip.Addr{netip.MustParseAddr("10.5.0.1"), netip.MustParseAddr("fd74:616c:a05::1")},
		IPv6: netip.MustParsePrefix("fd74:616c:a05::/64"), LeaseTime: time.Hour,
		Nodes: []vm.NodeLease{{Name: "n1", MAC: "52:54:00:05:00:02", Address6: node}},
	}

	for _, link := range []string{"srv0", "srv1"} {
		spec.Bridge = link

		handler, err := spec.DHCP6Handler()
		if err != nil {
			t.Fatal(err)
		}

		srv, err := server6.NewServer(link, nil, handler)
		if err != nil {
			t.Fatal(err)
		}

		go srv.Serve() // ends with Close

		t.Cleanup(func() { srv.Close() })
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	lease, err := dhcp6.Acquire(ctx, "node0", nil)
	if err != nil {
		t.Fatal(err)
	}

	if lease.Address != node || lease.Valid != time.Hour || lease.T1 != 30*time.Minute || lease.T2 != 48*time.Minute {
		t.Errorf("lease %s valid %s T1 %s T2 %s", lease.Address, lease.Valid, lease.T1, lease.T2)
	}

	if len(lease.DNS) != 1 || lease.DNS[0] != netip.MustParseAddr("fd74:616c:a05::1") {
		t.Errorf("name servers %v: want the IPv6 one only", lease.DNS)
	}

	for _, rebind := range []bool{false, true} {
		renewed, err := dhcp6.Renew(ctx, lease, rebind)
		if err != nil {
			t.Fatalf("rebind %v: %v", rebind, err)
		}

		if renewed.Address != node || !renewed.Obtained.After(lease.Obtained) {
			t.Errorf("rebind %v: %s obtained %s", rebind, renewed.Address, renewed.Obtained)
		}
	}

	short, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()

	if l, err := dhcp6.Acquire(short, "stranger0", nil); err == nil {
		t.Errorf("a machine the network does not know leased %s", l.Address)
	}

	// The config's duidv6 is the client's DUID, in every exchange: here it names the node's MAC,
	// which the network knows, from the other link.
	duid, err := dhcp6.ParseDUID("00:03:00:01:52:54:00:05:00:02")
	if err != nil {
		t.Fatal(err)
	}

	lease, err = dhcp6.Acquire(ctx, "stranger0", duid)
	if err != nil || lease.Address != node {
		t.Fatalf("with duidv6: %s %v", lease.Address, err)
	}

	if renewed, err := dhcp6.Renew(ctx, lease, false); err != nil || renewed.Address != node {
		t.Fatalf("renewing with duidv6: %s %v", renewed.Address, err)
	}

	for _, bad := range []string{"zz", "00:03"} {
		if _, err := dhcp6.ParseDUID(bad); err == nil || !strings.Contains(err.Error(), "duidv6") {
			t.Errorf("duidv6 %q: %v", bad, err)
		}
	}
}
