package hostdns

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"
)

// upstream is a real DNS server on a loopback port: it answers A queries for name with ip
// (TTL ttl) and NXDOMAIN otherwise, and counts the queries it got.
func upstream(t *testing.T, name string, ip net.IP, ttl uint32) (netip.AddrPort, *atomic.Int32) {
	t.Helper()

	var count atomic.Int32

	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		count.Add(1)

		m := new(dns.Msg)
		m.SetReply(req)

		if q := req.Question[0]; q.Name == name && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: ip})
		} else {
			m.Rcode = dns.RcodeNameError
		}

		w.WriteMsg(m)
	})

	// Upstreams are asked on one port over UDP and TCP: a free UDP port, taken for both. Its
	// TCP twin may be someone else's: then another port.
	var (
		addr netip.AddrPort
		l    *Listener
		err  error
	)

	for range 5 {
		pc, perr := net.ListenPacket("udp", "127.0.0.1:0")
		if perr != nil {
			t.Fatal(perr)
		}

		addr = netip.MustParseAddrPort(pc.LocalAddr().String())
		pc.Close()

		if l, err = Listen(addr, h); err == nil {
			break
		}
	}

	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { l.Close() })

	return addr, &count
}

func query(t *testing.T, network string, addr netip.AddrPort, name string) *dns.Msg {
	t.Helper()

	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)

	resp, _, err := (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(q, addr.String())
	if err != nil {
		t.Fatalf("%s query for %s: %v", network, name, err)
	}

	return resp
}

func TestResolverForwardsCachesAndFailsOver(t *testing.T) {
	up, count := upstream(t, "node.example.", net.IPv4(192, 0, 2, 10), 60)

	// The first upstream is dead (a closed port): the resolver goes on to the live one and
	// then asks the live one first.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	deadAddr := netip.MustParseAddrPort(dead.LocalAddr().String())
	dead.Close()

	r := NewResolver(zaptest.NewLogger(t))
	ups := r.SetUpstreams([]netip.AddrPort{deadAddr, up})

	l, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), r)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	addr := netip.MustParseAddrPort(l.servers[0].PacketConn.LocalAddr().String())
	tcpAddr := netip.MustParseAddrPort(l.servers[1].Listener.Addr().String())

	resp := query(t, "udp", addr, "node.example.")
	if len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != "192.0.2.10" {
		t.Fatalf("answer %v", resp)
	}

	if ups[0].Fails() == 0 || ups[1].Fails() != 0 {
		t.Fatalf("fails: dead %d, live %d", ups[0].Fails(), ups[1].Fails())
	}

	// Cached: the same question over TCP does not reach the upstream again, and its TTL has
	// not grown.
	resp = query(t, "tcp", tcpAddr, "NODE.example.")
	if len(resp.Answer) != 1 || resp.Answer[0].Header().Ttl > 60 || count.Load() != 1 {
		t.Fatalf("second answer %v after %d upstream queries", resp, count.Load())
	}

	// A negative answer is passed on and kept too.
	for range 2 {
		if resp = query(t, "udp", addr, "missing.example."); resp.Rcode != dns.RcodeNameError {
			t.Fatalf("rcode %s for a missing name", dns.RcodeToString[resp.Rcode])
		}
	}

	if count.Load() != 2 {
		t.Fatalf("%d upstream queries, want 2 (one per name)", count.Load())
	}

	// New upstreams drop the cache; with none left alive the answer is SERVFAIL.
	r.SetUpstreams([]netip.AddrPort{deadAddr})

	if resp = query(t, "udp", addr, "node.example."); resp.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s with a dead upstream", dns.RcodeToString[resp.Rcode])
	}
}

func TestCacheTTL(t *testing.T) {
	m := new(dns.Msg)
	m.Answer = []dns.RR{
		&dns.A{Hdr: dns.RR_Header{Rrtype: dns.TypeA, Ttl: 300}},
		&dns.A{Hdr: dns.RR_Header{Rrtype: dns.TypeA, Ttl: 20}},
	}

	if ttl, ok := cacheTTL(m); !ok || ttl != 20*time.Second {
		t.Fatalf("answer ttl %v %v", ttl, ok)
	}

	m = &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Ns: []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Rrtype: dns.TypeSOA, Ttl: 900}, Minttl: 45}}}
	if ttl, ok := cacheTTL(m); !ok || ttl != 45*time.Second {
		t.Fatalf("negative ttl %v %v", ttl, ok)
	}

	if _, ok := cacheTTL(&dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}}); ok {
		t.Fatal("a failure was cacheable")
	}

	c := newCache(1)
	now := time.Now()
	c.put("a", &dns.Msg{Answer: []dns.RR{&dns.A{Hdr: dns.RR_Header{Rrtype: dns.TypeA, Ttl: 10}}}}, now)
	c.put("b", &dns.Msg{Answer: []dns.RR{&dns.A{Hdr: dns.RR_Header{Rrtype: dns.TypeA, Ttl: 10}}}}, now)

	if c.get("b", now) != nil || c.get("a", now.Add(4*time.Second)).Answer[0].Header().Ttl != 6 || c.get("a", now.Add(10*time.Second)) != nil {
		t.Fatal("the cache kept more than its bound, or did not age or expire its answer")
	}
}
