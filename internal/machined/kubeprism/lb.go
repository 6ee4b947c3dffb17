// Package kubeprism is the node-local load balancer in front of the Kubernetes API servers
// (upstream's KubePrism): a TCP proxy on 127.0.0.1:<port> that sends each connection to the
// healthy upstream with the lowest connect time: this control plane's own API server, the
// cluster endpoint, and every control plane's address. Host-network pods (kube-proxy, the CNI)
// reach the API through it, so they do not depend on the endpoint alone.
package kubeprism

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Timings of the health checks and of a connection's dial.
const (
	checkInterval = 5 * time.Second
	dialTimeout   = 5 * time.Second
)

// LB balances TCP connections over upstreams (host:port).
type LB struct {
	log *zap.Logger

	mu        sync.Mutex
	upstreams []string
	rtt       map[string]time.Duration // the healthy ones, by their last connect time
	checked   chan struct{}            // wakes the health loop when the upstreams change
}

// New returns a balancer; Serve runs it.
func New(log *zap.Logger) *LB {
	return &LB{log: log, rtt: map[string]time.Duration{}, checked: make(chan struct{}, 1)}
}

// SetUpstreams replaces the upstreams; they are checked at once.
func (lb *LB) SetUpstreams(upstreams []string) {
	lb.mu.Lock()
	lb.upstreams = slices.Clone(upstreams)
	lb.mu.Unlock()

	select {
	case lb.checked <- struct{}{}:
	default:
	}
}

// Healthy reports whether any upstream answered the last check.
func (lb *LB) Healthy() bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()

	return len(lb.rtt) > 0
}

// ordered are the upstreams to try: healthy ones by connect time, then the others.
func (lb *LB) ordered() []string {
	lb.mu.Lock()
	defer lb.mu.Unlock()

	out := slices.Clone(lb.upstreams)
	slices.SortStableFunc(out, func(a, b string) int {
		ra, okA := lb.rtt[a]
		rb, okB := lb.rtt[b]

		switch {
		case okA && okB:
			return int(ra - rb)
		case okA:
			return -1
		case okB:
			return 1
		default:
			return 0
		}
	})

	return out
}

// Serve listens on addr and proxies until ctx ends.
func (lb *LB) Serve(ctx context.Context, addr string) error {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}

	go func() {
		<-ctx.Done()
		l.Close()
	}()

	go lb.checkLoop(ctx)

	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the listener was closed by the shutdown asked for
			}

			return err
		}

		go lb.proxy(ctx, conn)
	}
}

func (lb *LB) proxy(ctx context.Context, conn net.Conn) {
	defer conn.Close()

	for _, up := range lb.ordered() {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		upConn, err := (&net.Dialer{}).DialContext(dctx, "tcp", up)

		cancel()

		if err != nil {
			lb.markDown(up)

			continue
		}

		pipe(conn, upConn)

		return
	}

	lb.log.Debug("no API server upstream answered", zap.Strings("upstreams", lb.ordered()))
}

// pipe copies both ways until either side closes.
func pipe(a, b net.Conn) {
	defer b.Close()

	done := make(chan struct{}, 2)

	cp := func(dst, src net.Conn) {
		io.Copy(dst, src) //nolint:errcheck // a closed connection ends the copy

		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite() //nolint:errcheck // the peer may be gone already
		}

		done <- struct{}{}
	}

	go cp(a, b)
	go cp(b, a)

	<-done
	<-done
}

func (lb *LB) markDown(up string) {
	lb.mu.Lock()
	delete(lb.rtt, up)
	lb.mu.Unlock()
}

// checkLoop measures each upstream's connect time every checkInterval (and when they change).
func (lb *LB) checkLoop(ctx context.Context) {
	for {
		lb.mu.Lock()
		ups := slices.Clone(lb.upstreams)
		lb.mu.Unlock()

		rtt := map[string]time.Duration{}

		for _, up := range ups {
			start := time.Now()

			dctx, cancel := context.WithTimeout(ctx, dialTimeout)
			c, err := (&net.Dialer{}).DialContext(dctx, "tcp", up)

			cancel()

			if err == nil {
				rtt[up] = time.Since(start)
				c.Close()
			} else if errors.Is(ctx.Err(), context.Canceled) {
				return
			}
		}

		lb.mu.Lock()
		lb.rtt = rtt
		lb.mu.Unlock()

		select {
		case <-ctx.Done():
			return
		case <-lb.checked:
		case <-time.After(checkInterval):
		}
	}
}
