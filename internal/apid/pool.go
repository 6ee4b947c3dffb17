package apid

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// fastReconnect bounds one connection attempt and keeps the retry backoff short, so a node
// that comes back is used again within seconds.
func fastReconnect(dialTimeout time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  200 * time.Millisecond,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   3 * time.Second,
		},
		MinConnectTimeout: dialTimeout,
	}
}

// maxPooled bounds the pool: past it, connections that are neither ready nor used in the last
// minute (idle, failing, never established) are closed before a new one is added, so callers
// naming many targets (bogus ones included) cannot grow it without end.
const (
	maxPooled = 256
	recentUse = time.Minute
)

type pooled struct {
	conn     *grpc.ClientConn
	lastUsed time.Time
}

// pool keeps one connection per remote apid, shared by every call to it.
type pool struct {
	creds       credentials.TransportCredentials
	dialTimeout time.Duration
	max         int

	mu    sync.Mutex
	conns map[string]*pooled
}

func newPool(creds credentials.TransportCredentials, dialTimeout time.Duration) *pool {
	return &pool{creds: creds, dialTimeout: dialTimeout, max: maxPooled, conns: map[string]*pooled{}}
}

// evictUnused closes the pooled connections that are neither ready nor recently used. It is
// called with mu held.
func (p *pool) evictUnused(now time.Time) {
	for addr, e := range p.conns {
		if e.conn.GetState() != connectivity.Ready && now.Sub(e.lastUsed) > recentUse {
			e.conn.Close()
			delete(p.conns, addr)
		}
	}
}

func (p *pool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	now := time.Now()

	if e, ok := p.conns[addr]; ok {
		e.lastUsed = now

		return e.conn, nil
	}

	if len(p.conns) >= p.max {
		p.evictUnused(now)
	}

	c, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(p.creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithConnectParams(fastReconnect(p.dialTimeout)),
		// A node nobody calls any more costs nothing: its connection closes after a while
		// and reopens on the next call.
		grpc.WithIdleTimeout(5*time.Minute),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}

	p.conns[addr] = &pooled{conn: c, lastUsed: now}

	return c, nil
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()

	for addr, e := range p.conns {
		e.conn.Close()
		delete(p.conns, addr)
	}
}
