package provision

import (
	"net/netip"
	"testing"
)

func TestGatewayAndLinkNames(t *testing.T) {
	if got := Gateway(netip.MustParsePrefix("10.5.0.0/24")); got.String() != "10.5.0.1/24" {
		t.Fatalf("gateway %s", got)
	}

	addrs, err := NodeAddresses(netip.MustParsePrefix("10.5.0.0/24"), 2)
	if err != nil || addrs[0].String() != "10.5.0.2" || addrs[1].String() != "10.5.0.3" {
		t.Fatalf("node addresses %v %v", addrs, err)
	}

	// Link names are at most 15 bytes and differ per cluster folder.
	a, b := "br-"+ShortHash("/a", 12), "br-"+ShortHash("/b", 12)
	if len(a) > 15 || a == b {
		t.Fatalf("bridge names %q %q", a, b)
	}
}
