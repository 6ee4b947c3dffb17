package trustd

import (
	"sync"
	"time"
)

// Limiter limits failed attempts per peer: each peer has a bucket of Burst failures that refills
// at one per Refill. A peer whose bucket is empty is refused before its token is even looked at,
// so guessing the token costs time.
type Limiter struct {
	Burst  int
	Refill time.Duration
	Now    func() time.Time // for tests; time.Now when nil

	mu    sync.Mutex
	peers map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxPeers bounds the table; full buckets are dropped first.
const maxPeers = 4096

func (l *Limiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}

	return time.Now()
}

// refill brings a bucket up to date and returns it (nil: the peer has a full bucket).
func (l *Limiter) refill(peer string, now time.Time) *bucket {
	b := l.peers[peer]
	if b == nil {
		return nil
	}

	if l.Refill > 0 {
		b.tokens += float64(now.Sub(b.last)) / float64(l.Refill)
	}

	b.last = now

	if b.tokens >= float64(l.Burst) {
		delete(l.peers, peer)

		return nil
	}

	return b
}

// Allowed reports whether the peer may make an attempt now.
func (l *Limiter) Allowed(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()

	b := l.refill(peer, l.now())

	return b == nil || b.tokens >= 1
}

// Failed records a failed attempt of the peer.
func (l *Limiter) Failed(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if l.peers == nil {
		l.peers = map[string]*bucket{}
	}

	now := l.now()

	b := l.refill(peer, now)
	if b == nil {
		if len(l.peers) >= maxPeers {
			l.prune(now)
		}

		b = &bucket{tokens: float64(l.Burst), last: now}
		l.peers[peer] = b
	}

	b.tokens = max(b.tokens-1, 0)
}

// prune drops refilled buckets and, if the table is still full, the least drained one.
func (l *Limiter) prune(now time.Time) {
	var fullest string

	for p := range l.peers {
		if l.refill(p, now) == nil {
			continue
		}

		if fullest == "" || l.peers[p].tokens > l.peers[fullest].tokens {
			fullest = p
		}
	}

	if len(l.peers) >= maxPeers && fullest != "" {
		delete(l.peers, fullest)
	}
}
