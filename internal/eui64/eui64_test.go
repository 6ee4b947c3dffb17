package eui64

import (
	"net"
	"net/netip"
	"testing"
)

// The address Linux's SLAAC makes for a qemu node's MAC (read off a node before the cluster
// network moved to DHCPv6).
func TestAddress(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:05:11:02")

	if got := Address(netip.MustParsePrefix("fd74:616c:a05:1100::/64"), mac); got != netip.MustParseAddr("fd74:616c:a05:1100:5054:ff:fe05:1102") {
		t.Fatal(got)
	}
}
