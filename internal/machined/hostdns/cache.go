package hostdns

import (
	"sync"
	"time"

	"github.com/miekg/dns"
)

const (
	// maxCacheEntries bounds the cache's memory: past it, answers are not kept until
	// expired ones are dropped.
	maxCacheEntries = 10000
	// maxTTL caps how long an answer is kept, whatever its records say.
	maxTTL = time.Hour
	// negativeTTL is how long a negative answer without an SOA is kept.
	negativeTTL = 30 * time.Second
)

type entry struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

// cache keeps successful and negative answers for their records' lowest TTL.
type cache struct {
	mu      sync.Mutex
	max     int
	entries map[string]entry
}

func newCache(maxEntries int) *cache {
	return &cache{max: maxEntries, entries: map[string]entry{}}
}

func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()

	clear(c.entries)
}

// get returns a copy of the answer with its TTLs lowered by the time it was kept.
func (c *cache) get(key string, now time.Time) *dns.Msg {
	c.mu.Lock()
	e, ok := c.entries[key]

	if ok && !now.Before(e.expires) {
		delete(c.entries, key)

		ok = false
	}
	c.mu.Unlock()

	if !ok {
		return nil
	}

	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)

	for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range rrs {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl = max(h.Ttl, age) - age
			}
		}
	}

	return m
}

func (c *cache) put(key string, m *dns.Msg, now time.Time) {
	ttl, ok := cacheTTL(m)
	if !ok || ttl <= 0 {
		return
	}

	c.mu.Lock()
	defer c.mu.Unlock()

	if len(c.entries) >= c.max {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}

		if len(c.entries) >= c.max {
			return
		}
	}

	c.entries[key] = entry{msg: m.Copy(), stored: now, expires: now.Add(ttl)}
}

// cacheTTL is how long m may be kept: the lowest TTL of its records for an answer, the SOA's
// negative TTL for NXDOMAIN or no data; failures are not kept.
func cacheTTL(m *dns.Msg) (time.Duration, bool) {
	switch m.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return 0, false
	}

	if m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
		lowest := uint32(maxTTL / time.Second)

		for _, rr := range m.Answer {
			lowest = min(lowest, rr.Header().Ttl)
		}

		return time.Duration(lowest) * time.Second, true
	}

	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(time.Duration(min(soa.Minttl, soa.Hdr.Ttl))*time.Second, maxTTL), true
		}
	}

	return negativeTTL, true
}
