package provision

import (
	"net/netip"
	"slices"
	"testing"
)

// The talosconfig's endpoints: every control plane, the one --endpoint names, or the first
// with --init-node-as-endpoint.
func TestTalosEndpoints(t *testing.T) {
	cps := []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("10.5.0.3")}

	for _, c := range []struct {
		req  Request
		want []string
	}{
		{Request{}, []string{"10.5.0.2", "10.5.0.3"}},
		{Request{Endpoint: "lb.example.org"}, []string{"lb.example.org"}},
		{Request{InitNodeAsEndpoint: true}, []string{"10.5.0.2"}},
	} {
		if got := c.req.talosEndpoints(cps); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.req, got, c.want)
		}
	}
}

// --ipv6's network, as upstream derives it from --cidr.
func TestCIDR6(t *testing.T) {
	if got := CIDR6(netip.MustParsePrefix("10.5.0.0/24")); got != netip.MustParsePrefix("fd74:616c:a05::/64") {
		t.Fatal(got)
	}
}
