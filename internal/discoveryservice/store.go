package discoveryservice

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"time"
)

// Domain errors; the gRPC handlers turn them into codes (server.go).
var (
	errTooManyClusters   = errors.New("too many clusters")
	errTooManyAffiliates = errors.New("too many affiliates in the cluster")
	errTooManyEndpoints  = errors.New("too many endpoints in the affiliate")
)

// subscriptionBuffer is how many changes a watcher may lag behind before it is cut off (as
// upstream: a watcher that cannot keep up is ended, and its client reconnects and gets a fresh
// snapshot, rather than the server buffering without bound).
const subscriptionBuffer = 32

// endpoint is one opaque (encrypted) endpoint; each expires on its own, as upstream, so an
// address a node stopped reporting goes away while the node stays.
type endpoint struct {
	data    []byte
	expires time.Time
}

type affiliate struct {
	data      []byte
	endpoints []endpoint
	expires   time.Time
}

type cluster struct {
	affiliates map[string]*affiliate
	subs       map[*subscription]struct{}
}

// change is what a watcher receives: an affiliate's new state, or its deletion.
type change struct {
	id        string
	data      []byte
	endpoints [][]byte
	deleted   bool
}

type subscription struct {
	ch chan change
	// lost is closed when the watcher fell more than subscriptionBuffer changes behind.
	lost chan struct{}
}

// store holds every cluster's affiliates. One mutex: each operation is short (copying a few
// kilobytes at most), and the GC pass is the only one that walks everything.
type store struct {
	mu       sync.Mutex
	clusters map[string]*cluster
	// populated counts the clusters holding affiliates: only those count against
	// Limits.Clusters, so watchers of empty clusters cannot lock real ones out.
	populated int
	limits    Limits
	// next is the earliest expiry of anything stored (zero: nothing stored); wake tells the GC
	// loop that next moved earlier, so expiry is prompt rather than at the next fixed tick.
	next time.Time
	wake chan struct{}
}

func newStore(limits Limits) *store {
	return &store{clusters: map[string]*cluster{}, limits: limits, wake: make(chan struct{}, 1)}
}

// update applies an AffiliateUpdate: data replaces the old data when given (nil keeps it),
// endpoints merge (deduplicated) and each one's expiry extends to now+ttl. A refused update
// changes nothing.
func (s *store) update(clusterID, id string, data []byte, endpoints [][]byte, expires time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	c := s.clusters[clusterID]
	empty := c == nil || len(c.affiliates) == 0

	if empty && s.populated >= s.limits.Clusters {
		return errTooManyClusters
	}

	var a *affiliate
	if c != nil {
		a = c.affiliates[id]
	}

	if a == nil && c != nil && len(c.affiliates) >= s.limits.AffiliatesPerCluster {
		return errTooManyAffiliates
	}

	// Count the new endpoints before touching anything, so that a refusal leaves the
	// affiliate exactly as it was.
	var fresh [][]byte

	for _, e := range endpoints {
		if (a == nil || !a.hasEndpoint(e)) && !slices.ContainsFunc(fresh, func(f []byte) bool { return bytes.Equal(f, e) }) {
			fresh = append(fresh, e)
		}
	}

	existing := 0
	if a != nil {
		existing = len(a.endpoints)
	}

	if existing+len(fresh) > s.limits.EndpointsPerAffiliate {
		return errTooManyEndpoints
	}

	if c == nil {
		c = &cluster{affiliates: map[string]*affiliate{}, subs: map[*subscription]struct{}{}}
		s.clusters[clusterID] = c
	}

	changed := false

	if a == nil {
		a = &affiliate{}
		c.affiliates[id] = a
		changed = true

		if empty {
			s.populated++
		}
	}

	if data != nil {
		changed = changed || !bytes.Equal(a.data, data)
		a.data = bytes.Clone(data)
		a.expires = expires
	}

	for i := range a.endpoints {
		if slices.ContainsFunc(endpoints, func(e []byte) bool { return bytes.Equal(e, a.endpoints[i].data) }) &&
			a.endpoints[i].expires.Before(expires) {
			a.endpoints[i].expires = expires
		}
	}

	for _, e := range fresh {
		a.endpoints = append(a.endpoints, endpoint{data: bytes.Clone(e), expires: expires})
		changed = true
	}

	if a.expires.Before(expires) {
		a.expires = expires
	}

	if s.next.IsZero() || expires.Before(s.next) {
		s.next = expires
		s.poke()
	}

	if changed {
		c.notify(a.change(id))
	}

	return nil
}

// remove deletes an affiliate (AffiliateDelete); deleting one that is not there is not an
// error, as upstream.
func (s *store) remove(clusterID, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	c := s.clusters[clusterID]
	if c == nil || c.affiliates[id] == nil {
		return
	}

	s.delete(c, id)
	s.dropIfEmpty(clusterID, c)
}

// list returns the cluster's affiliates that have not expired at now.
func (s *store) list(clusterID string, now time.Time) []change {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.live(s.clusters[clusterID], now)
}

// subscribe returns the live affiliates and a subscription to later changes, atomically, so
// nothing happens between the snapshot and the first change.
func (s *store) subscribe(clusterID string, now time.Time) ([]change, *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()

	c := s.clusters[clusterID]
	if c == nil {
		// A watcher may come before the first affiliate; the cluster exists while watched. It
		// still counts against Clusters only once it holds an affiliate.
		c = &cluster{affiliates: map[string]*affiliate{}, subs: map[*subscription]struct{}{}}
		s.clusters[clusterID] = c
	}

	sub := &subscription{ch: make(chan change, subscriptionBuffer), lost: make(chan struct{})}
	c.subs[sub] = struct{}{}

	return s.live(c, now), sub
}

func (s *store) unsubscribe(clusterID string, sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if c := s.clusters[clusterID]; c != nil {
		delete(c.subs, sub)
		s.dropIfEmpty(clusterID, c)
	}
}

// collect removes what expired at now (affiliates, then single endpoints), tells the watchers,
// and returns the next expiry.
func (s *store) collect(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()

	var next time.Time

	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}

	for clusterID, c := range s.clusters {
		for id, a := range c.affiliates {
			if !a.expires.After(now) {
				s.delete(c, id)

				continue
			}

			earliest(a.expires)

			kept := a.endpoints[:0]
			for _, e := range a.endpoints {
				if e.expires.After(now) {
					kept = append(kept, e)
					earliest(e.expires)
				}
			}

			if len(kept) != len(a.endpoints) {
				clear(a.endpoints[len(kept):])
				a.endpoints = kept
				c.notify(a.change(id))
			}
		}

		s.dropIfEmpty(clusterID, c)
	}

	s.next = next

	return next
}

// poke wakes the GC loop without blocking (one pending wake is enough).
func (s *store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *store) live(c *cluster, now time.Time) []change {
	if c == nil {
		return nil
	}

	out := make([]change, 0, len(c.affiliates))

	for id, a := range c.affiliates {
		if a.expires.After(now) {
			out = append(out, a.change(id))
		}
	}

	return out
}

// delete removes an affiliate and tells the cluster's watchers.
func (s *store) delete(c *cluster, id string) {
	delete(c.affiliates, id)
	c.notify(change{id: id, deleted: true})

	if len(c.affiliates) == 0 {
		s.populated--
	}
}

func (s *store) dropIfEmpty(clusterID string, c *cluster) {
	if len(c.affiliates) == 0 && len(c.subs) == 0 {
		delete(s.clusters, clusterID)
	}
}

// counts returns the number of clusters holding affiliates, affiliates and subscriptions.
func (s *store) counts() (clusters, affiliates, subscriptions int) {
	s.mu.Lock()
	defer s.mu.Unlock()

	for _, c := range s.clusters {
		if len(c.affiliates) > 0 {
			clusters++
		}

		affiliates += len(c.affiliates)
		subscriptions += len(c.subs)
	}

	return clusters, affiliates, subscriptions
}

func (a *affiliate) hasEndpoint(e []byte) bool {
	return slices.ContainsFunc(a.endpoints, func(x endpoint) bool { return bytes.Equal(x.data, e) })
}

// change copies the affiliate out of the lock. The byte slices are shared: the store replaces
// them on update and never writes into them.
func (a *affiliate) change(id string) change {
	ch := change{id: id, data: a.data, endpoints: make([][]byte, len(a.endpoints))}
	for i, e := range a.endpoints {
		ch.endpoints[i] = e.data
	}

	return ch
}

// notify queues a change for each watcher; one that is full is cut off (its lost closes) and
// unsubscribed, as upstream does.
func (c *cluster) notify(ch change) {
	for sub := range c.subs {
		select {
		case sub.ch <- ch:
		default:
			close(sub.lost)
			delete(c.subs, sub)
		}
	}
}

func (s *store) nextExpiry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.next
}
