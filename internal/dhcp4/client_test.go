package dhcp4_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/talos-go/talos/internal/dhcp4"
)

func ack(t *testing.T, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()

	m, err := dhcpv4.New(mods...)
	if err != nil {
		t.Fatal(err)
	}

	return m
}

// TestACK: what a server's ACK says, as both the boot and machined read it.
func TestACK(t *testing.T) {
	full := ack(t,
		dhcpv4.WithYourIP(net.IPv4(10, 5, 0, 20)),
		dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
		dhcpv4.WithRouter(net.IPv4(10, 5, 0, 1), net.IPv4(10, 5, 0, 2)),
		dhcpv4.WithDNS(net.IPv4(10, 5, 0, 53), net.ParseIP("fd00::53")),
		dhcpv4.WithLeaseTime(600),
	)

	if got, ok := dhcp4.Address(full); !ok || got != netip.MustParsePrefix("10.5.0.20/24") {
		t.Errorf("address %s %v", got, ok)
	}

	if got, ok := dhcp4.Gateway(full); !ok || got != netip.MustParseAddr("10.5.0.1") {
		t.Errorf("gateway %s %v", got, ok)
	}

	if got := dhcp4.DNS(full); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("10.5.0.53")}) {
		t.Errorf("DNS %v, want the IPv4 one only", got)
	}

	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1, t2, end := dhcp4.Times(&nclient4.Lease{ACK: full, CreationTime: created})

	if t1 != created.Add(5*time.Minute) || t2 != created.Add(525*time.Second) || end != created.Add(10*time.Minute) {
		t.Errorf("times %s %s %s: want half, seven eighths and all of 600 s", t1, t2, end)
	}

	bare := ack(t, dhcpv4.WithYourIP(net.IPv4(10, 5, 0, 20)))

	if _, ok := dhcp4.Address(bare); ok {
		t.Error("an ACK without a netmask gave an address")
	}

	if _, ok := dhcp4.Gateway(bare); ok {
		t.Error("an ACK without a router gave a gateway")
	}

	if d := dhcp4.Duration(&nclient4.Lease{ACK: bare}, time.Hour); d != time.Hour {
		t.Errorf("duration without a lease time: %s, want the default", d)
	}
}
