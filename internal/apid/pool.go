package apid

import (
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
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

// maxPooled bounds the pool, hard: when it is full, connections nobody is using that are not
// ready (failing, connecting, idle), then those unused for a minute, are closed to make room;
// when every one is in use, a call to one more node is refused (ResourceExhausted). So callers
// naming many targets (bogus ones included) cannot grow it without end.
const (
	maxPooled = 256
	recentUse = time.Minute
)

type pooled struct {
	conn     *grpc.ClientConn
	lastUsed time.Time
	users    int // calls holding it (get without its release yet)
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

// evict closes the pooled connections no call holds that are not ready, or, when that freed
// nothing, that were not used in the last minute. It is called with mu held.
func (p *pool) evict(now time.Time) {
	for _, stale := range []func(*pooled) bool{
		func(e *pooled) bool { return e.conn.GetState() != connectivity.Ready },
		func(e *pooled) bool { return now.Sub(e.lastUsed) > recentUse },
	} {
		for addr, e := range p.conns {
			if e.users == 0 && stale(e) {
				e.conn.Close()
				delete(p.conns, addr)
			}
		}

		if len(p.conns) < p.max {
			return
		}
	}
}

// get returns the connection to addr and the function that releases it when the call ends;
// the error is a gRPC status.
func (p *pool) get(addr string) (*grpc.ClientConn, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	now := time.Now()

	e, ok := p.conns[addr]
	if !ok {
		if len(p.conns) >= p.max {
			p.evict(now)
		}

		if len(p.conns) >= p.max {
			return nil, nil, status.Errorf(codes.ResourceExhausted,
				"apid keeps connections to at most %d nodes and all are in use: %s is not reached; retry once calls to other nodes end", p.max, addr)
		}

		c, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(p.creds),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}),
				grpc.MaxCallRecvMsgSize(constants.GRPCMaxMessageSize), grpc.MaxCallSendMsgSize(constants.GRPCMaxMessageSize)),
			grpc.WithInitialWindowSize(windowSize),
			grpc.WithInitialConnWindowSize(windowSize),
			grpc.WithConnectParams(fastReconnect(p.dialTimeout)),
			// A node nobody calls any more costs nothing: its connection closes after a while
			// and reopens on the next call.
			grpc.WithIdleTimeout(5*time.Minute),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		)
		if err != nil {
			return nil, nil, status.Errorf(codes.Unavailable, "connecting to %s: %v", addr, err)
		}

		e = &pooled{conn: c}
		p.conns[addr] = e
	}

	e.lastUsed = now
	e.users++

	var once sync.Once

	return e.conn, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()

			e.users--
			e.lastUsed = time.Now()
		})
	}, nil
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()

	for addr, e := range p.conns {
		e.conn.Close()
		delete(p.conns, addr)
	}
}
