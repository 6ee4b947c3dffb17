package vm

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

// The advertisement parses as ICMPv6 (x/net's parser) with upstream-independent fields a node's
// kernel acts on: the managed and other-config flags (DHCPv6), a router lifetime, the source
// link-layer address, the prefix on-link and not autonomous (no SLAAC address besides DHCPv6's).
func TestRouterAdvertisement(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:aa:bb:cc")
	prefix := netip.MustParsePrefix("fd74:616c:a05:1100::/64")
	ra := RouterAdvertisement(prefix, mac)

	m, err := icmp.ParseMessage(ipv6.ICMPTypeRouterAdvertisement.Protocol(), ra)
	if err != nil || m.Type != ipv6.ICMPTypeRouterAdvertisement {
		t.Fatalf("%v %v", m, err)
	}

	if ra[5] != 0xc0 {
		t.Errorf("flags %x: want managed and other config", ra[5])
	}

	if ra[6] != 0x07 || ra[7] != 0x08 { // 1800 s
		t.Errorf("router lifetime %x", ra[6:8])
	}

	opt := ra[16:]
	if opt[0] != 1 || opt[1] != 1 || net.HardwareAddr(opt[2:8]).String() != mac.String() {
		t.Errorf("source link-layer option %x", opt[:8])
	}

	pi := opt[8:]
	if pi[0] != 3 || pi[1] != 4 || pi[2] != 64 || pi[3] != 0x80 || netip.AddrFrom16([16]byte(pi[16:32])) != prefix.Addr() {
		t.Errorf("prefix information %x", pi)
	}
}
