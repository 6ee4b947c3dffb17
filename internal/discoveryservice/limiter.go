package discoveryservice

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ipLimiter is a token bucket per source address. A request over the rate is refused at once
// (upstream makes it wait instead; refusing keeps a flood from holding server goroutines).
type ipLimiter struct {
	mu      sync.Mutex
	buckets map[netip.Addr]*rate.Limiter
	rate    rate.Limit
	burst   int
	now     func() time.Time
}

func newIPLimiter(perSecond float64, burst int, now func() time.Time) *ipLimiter {
	return &ipLimiter{buckets: map[netip.Addr]*rate.Limiter{}, rate: rate.Limit(perSecond), burst: burst, now: now}
}

func (l *ipLimiter) allow(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()

	b := l.buckets[ip]
	if b == nil {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[ip] = b
	}

	return b.AllowN(l.now(), 1)
}

// collect forgets the addresses whose bucket is full again: a new bucket would be the same,
// so the map only holds recently busy addresses.
func (l *ipLimiter) collect() {
	l.mu.Lock()
	defer l.mu.Unlock()

	now := l.now()

	for ip, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, ip)
		}
	}
}
