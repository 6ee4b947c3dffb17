package vm

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/hostdns"
	"github.com/talos-go/talos/internal/ntpserver"
)

// resolvConf is the host's resolver configuration, which the cluster's DNS forwards to.
const resolvConf = "/etc/resolv.conf"

// serveTimeAndNames serves NTP and a caching DNS forwarder on the gateway's address, so that a
// local cluster's nodes keep time (etcd waits for it) and resolve names without the internet:
// the generated configs name the gateway unless the user names other servers. Each is best
// effort: a port already taken there (a test's own NTP server) is logged and left alone. It
// returns what stops them.
func (s NetworkSpec) serveTimeAndNames() (stop func()) {
	var stops []func()

	gw := s.Gateway.Addr()

	if conn, err := net.ListenPacket("udp", netip.AddrPortFrom(gw, 123).String()); err != nil {
		fmt.Fprintf(os.Stderr, "[network] not serving NTP: %v\n", err)
	} else {
		go (&ntpserver.Server{}).Serve(conn)

		stops = append(stops, func() { conn.Close() })

		fmt.Fprintf(os.Stderr, "[network] NTP on %s\n", conn.LocalAddr())
	}

	upstreams := s.DNSUpstreams
	if len(upstreams) == 0 {
		upstreams = hostResolvers(resolvConf)
	}

	resolver := hostdns.NewResolver(zap.NewNop())
	resolver.SetUpstreams(upstreams)

	if l, err := hostdns.Listen(netip.AddrPortFrom(gw, 53), resolver); err != nil {
		fmt.Fprintf(os.Stderr, "[network] not serving DNS: %v\n", err)
	} else {
		stops = append(stops, func() { l.Close() })

		fmt.Fprintf(os.Stderr, "[network] DNS on %s:53, forwarding to %s\n", gw, joinAddrs(upstreams))
	}

	return func() {
		for _, f := range stops {
			f()
		}
	}
}

// hostResolvers are the nameservers of the host's resolv.conf, on port 53; none when it cannot
// be read (the forwarder then answers SERVFAIL at once, not a timeout).
func hostResolvers(path string) []netip.AddrPort {
	cfg, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil
	}

	var addrs []netip.AddrPort

	for _, s := range cfg.Servers {
		if a, err := netip.ParseAddr(s); err == nil {
			addrs = append(addrs, netip.AddrPortFrom(a.Unmap(), 53))
		}
	}

	return addrs
}

func joinAddrs(addrs []netip.AddrPort) string {
	if len(addrs) == 0 {
		return "nothing (no resolver in " + resolvConf + ")"
	}

	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}

	return strings.Join(s, ", ")
}
