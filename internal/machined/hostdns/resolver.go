// Package hostdns is the node's caching DNS resolver, upstream's host DNS: it answers the
// node's own lookups on 127.0.0.53:53 and, with forwardKubeDNSToHost, CoreDNS's on
// 169.254.116.108:53, over UDP and TCP, for the cluster members' names (resolveMemberNames),
// from its cache or from the node's resolvers.
package hostdns

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// Resolver answers queries from its cache, or asks the upstream servers in turn.
type Resolver struct {
	log   *zap.Logger
	cache *cache

	mu        sync.Mutex
	upstreams []*Upstream
	members   []Member
}

// NewResolver returns a resolver without upstreams: it answers SERVFAIL until SetUpstreams.
func NewResolver(log *zap.Logger) *Resolver {
	return &Resolver{log: log, cache: newCache(maxCacheEntries)}
}

// SetUpstreams replaces the servers asked, keeping the health of the ones that stay; the cache
// is dropped when they change, as its answers came from the old ones.
func (r *Resolver) SetUpstreams(addrs []netip.AddrPort) []*Upstream {
	r.mu.Lock()
	defer r.mu.Unlock()

	old := map[netip.AddrPort]*Upstream{}
	for _, u := range r.upstreams {
		old[u.addr] = u
	}

	next := make([]*Upstream, 0, len(addrs))
	changed := len(addrs) != len(r.upstreams)

	for i, a := range addrs {
		u := old[a]
		if u == nil {
			u = &Upstream{addr: a}
		}

		if !changed && r.upstreams[i] != u {
			changed = true
		}

		next = append(next, u)
	}

	if changed {
		r.cache.clear()
	}

	r.upstreams = next

	return next
}

func (r *Resolver) current() []*Upstream {
	r.mu.Lock()
	defer r.mu.Unlock()

	return r.upstreams
}

// ServeDNS implements dns.Handler.
func (r *Resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	resp := r.resolve(req, w.RemoteAddr().Network())

	if err := w.WriteMsg(resp); err != nil {
		r.log.Debug("writing a DNS answer", zap.Error(err))
	}
}

// queryTimeout bounds one upstream exchange; a dead server costs this much once, then goes
// after the healthy ones.
const queryTimeout = 2 * time.Second

func (r *Resolver) resolve(req *dns.Msg, network string) *dns.Msg {
	if len(req.Question) != 1 {
		return failure(req, dns.RcodeFormatError)
	}

	// A member's name is answered here, never forwarded nor cached.
	if m := r.memberAnswer(req); m != nil {
		return truncateFor(req, m, network)
	}

	key := cacheKey(req.Question[0], req.CheckingDisabled)

	if m := r.cache.get(key, time.Now()); m != nil {
		m.Id = req.Id

		return truncateFor(req, m, network)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*queryTimeout)
	defer cancel()

	var lastErr error

	for _, u := range ordered(r.current()) {
		resp, err := u.exchange(ctx, req)
		if err != nil {
			lastErr = err

			continue
		}

		if !resp.Truncated {
			r.cache.put(key, resp, time.Now())
		}

		resp.Id = req.Id

		return truncateFor(req, resp, network)
	}

	if lastErr == nil {
		lastErr = errors.New("no upstream DNS servers: set machine.network.nameservers")
	}

	r.log.Warn("no upstream answered", zap.String("question", req.Question[0].String()), zap.Error(lastErr))

	return failure(req, dns.RcodeServerFailure)
}

// truncateFor fits an answer to a UDP client's buffer (512 bytes without EDNS0).
func truncateFor(req, resp *dns.Msg, network string) *dns.Msg {
	if network == "udp" {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}

		resp.Truncate(size)
	}

	return resp
}

func failure(req *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)

	return m
}

// ordered puts the healthy upstreams first, keeping the configured order otherwise.
func ordered(us []*Upstream) []*Upstream {
	out := make([]*Upstream, 0, len(us))

	for _, healthy := range []bool{true, false} {
		for _, u := range us {
			if (u.Fails() == 0) == healthy {
				out = append(out, u)
			}
		}
	}

	return out
}

// Upstream is one of the node's resolvers, with its count of consecutive failures. It
// implements machinery's network.Proxy, so a DNSUpstream resource shows it.
type Upstream struct {
	addr  netip.AddrPort
	fails atomic.Uint32
}

func (u *Upstream) hostPort() string { return u.addr.String() }

func (u *Upstream) exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()

	q := req.Copy()
	q.Id = dns.Id()

	resp, _, err := (&dns.Client{Net: "udp", UDPSize: dns.DefaultMsgSize}).ExchangeContext(ctx, q, u.hostPort())
	if err == nil && resp.Truncated {
		resp, _, err = (&dns.Client{Net: "tcp"}).ExchangeContext(ctx, q, u.hostPort())
	}

	if err != nil {
		u.fails.Add(1)

		return nil, err
	}

	u.fails.Store(0)

	return resp, nil
}

// Addr implements network.Proxy.
func (u *Upstream) Addr() string { return u.addr.String() }

// Fails implements network.Proxy: consecutive failed exchanges.
func (u *Upstream) Fails() uint32 { return u.fails.Load() }

// Healthcheck implements network.Proxy: asks the server for the root's name servers.
func (u *Upstream) Healthcheck() {
	q := new(dns.Msg)
	q.SetQuestion(".", dns.TypeNS)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	u.exchange(ctx, q) //nolint:errcheck // counted in fails
}

// Start implements network.Proxy: nothing runs in the background, exchanges count failures.
func (u *Upstream) Start(time.Duration) {}

// Close implements network.Proxy.
func (u *Upstream) Close() {}

func cacheKey(q dns.Question, cd bool) string {
	var b strings.Builder

	b.WriteString(strings.ToLower(q.Name))
	b.WriteByte('/')
	b.WriteString(dns.TypeToString[q.Qtype])
	b.WriteByte('/')
	b.WriteString(dns.ClassToString[q.Qclass])

	if cd {
		b.WriteString("/cd")
	}

	return b.String()
}
