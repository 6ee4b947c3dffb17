// Package connlimit bounds what clients of an unauthenticated listener (trustd, the
// maintenance API) can hold: connections per source address (Listener), and, per connection,
// streams, handshake time, idleness, keepalive pings and header and message sizes
// (ServerOptions). Anyone who can reach the port can open connections there, so these bounds
// are all that stands between one client and the memory and goroutines of the node.
package connlimit

import (
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The limits of an unauthenticated listener. A joining node or a talosctl in maintenance mode
// uses one or two connections and a handful of streams.
const (
	// MaxPerSource is how many connections one source address may have open at once.
	MaxPerSource = 32
	// MaxStreams is how many calls one connection may have open at once.
	MaxStreams = 16
	// HandshakeTimeout bounds a new connection's TLS and HTTP/2 handshakes.
	HandshakeTimeout = 10 * time.Second
	// MaxIdle closes a connection that has had no call for this long.
	MaxIdle = 2 * time.Minute
	// MaxHeaderList bounds a request's header list (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE).
	MaxHeaderList = 64 << 10
	// keepaliveMinTime: a client pinging more often is disconnected (GOAWAY too_many_pings).
	keepaliveMinTime = 10 * time.Second
)

// ServerOptions are the gRPC options of an unauthenticated server: MaxStreams calls per
// connection, HandshakeTimeout, MaxIdle, keepalive enforcement (a client pinging more often
// than every 10s is disconnected; pings do not keep an idle connection open), the server's own keepalive pings (a dead peer is dropped after
// a minute and a half), MaxHeaderList, and maxMsg for messages both ways. A maxAge above zero
// also closes every connection that old (gracefully: calls in flight get a minute more), which
// bounds what a client sending its request a byte at a time can hold.
func ServerOptions(maxMsg int, maxAge time.Duration) []grpc.ServerOption {
	params := keepalive.ServerParameters{MaxConnectionIdle: MaxIdle, Time: time.Minute, Timeout: 20 * time.Second}
	if maxAge > 0 {
		params.MaxConnectionAge, params.MaxConnectionAgeGrace = maxAge, time.Minute
	}

	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(MaxStreams),
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(params),
		grpc.MaxHeaderListSize(MaxHeaderList),
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
	}
}

// Listener accepts at most Max connections at once from one source address; a connection past
// that is closed as soon as it is accepted (its client sees the connection end before the TLS
// handshake). Connections count until they are closed.
type Listener struct {
	net.Listener

	max int

	mu   sync.Mutex
	open map[string]int
}

// PerSource wraps l: at most max connections from one source address at once.
func PerSource(l net.Listener, max int) *Listener {
	return &Listener{Listener: l, max: max, open: map[string]int{}}
}

// Accept returns the next connection whose source is within its limit.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}

		src := source(c.RemoteAddr())

		l.mu.Lock()
		n := l.open[src]
		if n < l.max {
			l.open[src] = n + 1
		}
		l.mu.Unlock()

		if n >= l.max {
			c.Close()

			continue
		}

		return &conn{Conn: c, release: func() { l.release(src) }}, nil
	}
}

// Open is how many connections src has open.
func (l *Listener) Open(src string) int {
	l.mu.Lock()
	defer l.mu.Unlock()

	return l.open[src]
}

func (l *Listener) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

// source is the address a connection comes from, without its port.
func source(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}

	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}

	return a.String()
}

// conn gives its slot back once, on the first Close.
type conn struct {
	net.Conn

	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)

	return err
}
