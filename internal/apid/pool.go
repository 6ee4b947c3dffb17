package apid

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
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

// pool keeps one connection per remote apid, shared by every call to it.
type pool struct {
	creds       credentials.TransportCredentials
	dialTimeout time.Duration

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPool(creds credentials.TransportCredentials, dialTimeout time.Duration) *pool {
	return &pool{creds: creds, dialTimeout: dialTimeout, conns: map[string]*grpc.ClientConn{}}
}

func (p *pool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	if c, ok := p.conns[addr]; ok {
		return c, nil
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

	p.conns[addr] = c

	return c, nil
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()

	for addr, c := range p.conns {
		c.Close() //nolint:errcheck
		delete(p.conns, addr)
	}
}
