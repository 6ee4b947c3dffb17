package hostdns

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"
)

// TestResolverAnswersMembers: with members set, the host DNS answers A and AAAA queries for a
// member's hostname (in full or its first label) and node name itself, with the member's
// addresses of that family; other names, and a family the member has no address of, go
// upstream; without members every name goes upstream.
func TestResolverAnswersMembers(t *testing.T) {
	up, count := upstream(t, "cp1.example.org.", net.IPv4(192, 0, 2, 10), 60)

	r := NewResolver(zaptest.NewLogger(t))
	r.SetUpstreams([]netip.AddrPort{up})

	l, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), r)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	addr := netip.MustParseAddrPort(l.servers[0].PacketConn.LocalAddr().String())

	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()

		q := new(dns.Msg)
		q.SetQuestion(name, qtype)

		resp, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(q, addr.String())
		if err != nil {
			t.Fatalf("query for %s: %v", name, err)
		}

		return resp
	}

	r.SetMembers([]Member{
		{Names: []string{"cp1.example.org", "cp1"}, Addresses: []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("fd00::2")}},
		{Names: []string{"worker1", "w1-node"}, Addresses: []netip.Addr{netip.MustParseAddr("10.5.0.3")}},
	})

	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"cp1.example.org.", dns.TypeA, "10.5.0.2"},
		{"CP1.", dns.TypeA, "10.5.0.2"},
		{"cp1.", dns.TypeAAAA, "fd00::2"},
		{"worker1.", dns.TypeA, "10.5.0.3"},
		{"w1-node.", dns.TypeA, "10.5.0.3"},
	} {
		resp := ask(tc.name, tc.qtype)
		if len(resp.Answer) != 1 || !resp.Authoritative {
			t.Fatalf("%s %s: %v", tc.name, dns.TypeToString[tc.qtype], resp)
		}

		var got string

		switch rr := resp.Answer[0].(type) {
		case *dns.A:
			got = rr.A.String()
		case *dns.AAAA:
			got = rr.AAAA.String()
		}

		if got != tc.want || resp.Answer[0].Header().Ttl != memberTTL || resp.Answer[0].Header().Name != tc.name {
			t.Errorf("%s %s: %v, want %s", tc.name, dns.TypeToString[tc.qtype], resp.Answer[0], tc.want)
		}
	}

	if count.Load() != 0 {
		t.Fatalf("%d queries for members went upstream", count.Load())
	}

	// worker1 has no IPv6 address, and example.org is no member's name: both go upstream.
	ask("worker1.", dns.TypeAAAA)
	ask("example.org.", dns.TypeA)

	if count.Load() != 2 {
		t.Fatalf("%d upstream queries, want 2", count.Load())
	}

	// Members off: the upstream's answer for the same name.
	r.SetMembers(nil)

	if resp := ask("cp1.example.org.", dns.TypeA); len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != "192.0.2.10" || resp.Authoritative {
		t.Fatalf("without members: %v", resp)
	}
}
