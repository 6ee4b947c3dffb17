package vm

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/beevik/ntp"
	"github.com/miekg/dns"
)

// The network process's NTP and DNS on the gateway's address: a node asking the gateway gets
// the host's time, and names from the upstream resolvers (a real DNS server here, standing in
// for the host's), over UDP and TCP.
func TestTimeAndNamesOnTheGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ports 53 and 123 need root (CI runs as root)")
	}

	upstream, err := net.ListenPacket("udp", "127.5.60.2:0")
	if err != nil {
		t.Fatal(err)
	}

	answer := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 10.9.8.7")
		m.Answer = append(m.Answer, rr)
		w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: upstream, Handler: answer}

	go srv.ActivateAndServe()
	defer srv.Shutdown()

	spec := NetworkSpec{Gateway: netip.MustParsePrefix("127.5.60.1/24"), DNSUpstreams: []netip.AddrPort{netip.MustParseAddrPort(upstream.LocalAddr().String())}}

	stop := spec.serveTimeAndNames()
	defer stop()

	resp, err := ntp.QueryWithOptions("127.5.60.1", ntp.QueryOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("NTP on the gateway: %v", err)
	}

	if err = resp.Validate(); err != nil || resp.Stratum != 1 || resp.ClockOffset.Abs() > time.Second {
		t.Errorf("NTP on the gateway: %v, stratum %d, offset %s: want a valid stratum 1 answer with the host's time", err, resp.Stratum, resp.ClockOffset)
	}

	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 5 * time.Second}

		m, _, err := c.Exchange(new(dns.Msg).SetQuestion("node.example.", dns.TypeA), "127.5.60.1:53")
		if err != nil {
			t.Fatalf("DNS over %s on the gateway: %v", network, err)
		}

		if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.9.8.7" {
			t.Errorf("DNS over %s on the gateway: %v, want the upstream's 10.9.8.7", network, m.Answer)
		}
	}

	// A second network process on the same address (or a test's own NTP server there) does not
	// fail: it serves what it can.
	spec.serveTimeAndNames()()
}

func TestHostResolvers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte("# a comment\nnameserver 127.0.0.53\nnameserver 2001:db8::1\nsearch example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	got := hostResolvers(path)
	if len(got) != 2 || got[0].String() != "127.0.0.53:53" || got[1].String() != "[2001:db8::1]:53" {
		t.Errorf("hostResolvers: %v, want 127.0.0.53:53 and [2001:db8::1]:53", got)
	}

	if got := hostResolvers(filepath.Join(t.TempDir(), "missing")); got != nil {
		t.Errorf("hostResolvers of a missing file: %v, want none", got)
	}
}
