package h2relay

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// The defaults of a Server's limits. They are generous for a person's talosctl and for other
// nodes' apids, and bound what a hostile client (one with a valid certificate) can hold.
const (
	defaultMaxHeaderList    = 1 << 20
	defaultWriteTimeout     = 20 * time.Second
	defaultIdleTimeout      = 5 * time.Minute
	defaultKeepaliveTime    = time.Minute
	defaultKeepaliveTimeout = 20 * time.Second

	// A client may reset resetBurst open streams at once, and resetRate more per second: a
	// client that opens streams only to reset them (the HTTP/2 "rapid reset" attack,
	// CVE-2023-44487) makes the backend start and cancel a call for each at almost no cost to
	// itself, and the stream limit never sees them. Past the budget its connection ends with
	// GOAWAY ENHANCE_YOUR_CALM. A client that cancels its calls as people do (a log follow
	// ended, a fan-out given up) stays far below it.
	resetBurst = 1000
	resetRate  = 100

	// backendMaxHeaderList bounds what a backend (ours, trusted) may send in one header block.
	backendMaxHeaderList = 16 << 20
)

func (s *Server) maxHeaderList() uint32 { return orDefault(s.MaxHeaderListSize, defaultMaxHeaderList) }

func (s *Server) writeTimeout() time.Duration { return orDefault(s.WriteTimeout, defaultWriteTimeout) }

func (s *Server) idleTimeout() time.Duration { return orDefault(s.IdleTimeout, defaultIdleTimeout) }

func (s *Server) keepaliveTime() time.Duration {
	return orDefault(s.KeepaliveTime, defaultKeepaliveTime)
}

func (s *Server) keepaliveTimeout() time.Duration {
	return orDefault(s.KeepaliveTimeout, defaultKeepaliveTimeout)
}

// tick is how often a session's watchdog looks at it: often enough that each limit is applied
// within half of itself.
func (s *Server) tick() time.Duration {
	return min(s.idleTimeout(), s.keepaliveTime(), s.keepaliveTimeout()) / 2
}

func orDefault[T uint32 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}

	return v
}

// deadlineWriter gives every write to a connection a deadline of its own. The relay writes
// under its session's lock; a peer that stops reading (a zero TCP window) would otherwise hold
// that lock, and with it the session and a Stop waiting for it, for as long as it likes.
type deadlineWriter struct {
	c       net.Conn
	timeout time.Duration
}

func (w deadlineWriter) Write(b []byte) (int, error) {
	if err := w.c.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
		return 0, err
	}

	return w.c.Write(b)
}

// keepalive is what the watchdog knows of a client's liveness.
type keepalive struct {
	seen   int64     // frames read from the client at the last look
	lastAt time.Time // when that count last changed
	pinged time.Time // when we pinged it, for a client silent since; zero: not pinged
}

var keepalivePing = [8]byte{'h', '2', 'r', 'e', 'l', 'a', 'y', '!'}

// startWatchdog starts the session's timer; it is called with mu held, after the preface.
func (ss *session) startWatchdog() {
	now := time.Now()
	ss.idleSince, ss.alive.lastAt = now, now
	ss.timer = time.AfterFunc(ss.srv.tick(), ss.watch)
}

// watch applies the idle timeout and the keepalive, then rearms the timer. A connection that
// has had no stream for IdleTimeout gets GOAWAY and is closed; a client nothing was read from
// for KeepaliveTime is pinged, and closed if it still sent nothing KeepaliveTimeout later (a
// dead peer, or one that stopped reading: its ack never comes).
func (ss *session) watch() {
	ss.mu.Lock()
	defer ss.mu.Unlock()

	if ss.closed {
		return
	}

	now := time.Now()

	if n := ss.reads.Load(); n != ss.alive.seen {
		ss.alive = keepalive{seen: n, lastAt: now}
	}

	switch {
	case len(ss.streams) == 0 && now.Sub(ss.idleSince) >= ss.srv.idleTimeout():
		ss.client.check(ss.client.fw.WriteGoAway(ss.lastID, http2.ErrCodeNo, []byte("idle")))
		ss.flushAll()
		ss.closeLocked()

		return
	case !ss.alive.pinged.IsZero() && now.Sub(ss.alive.pinged) >= ss.srv.keepaliveTimeout():
		ss.srv.logf("client connection ended", fmt.Errorf("no answer to a keepalive ping within %v", ss.srv.keepaliveTimeout()))
		ss.closeLocked()

		return
	case ss.alive.pinged.IsZero() && now.Sub(ss.alive.lastAt) >= ss.srv.keepaliveTime():
		ss.client.check(ss.client.fw.WritePing(false, keepalivePing))
		ss.client.check(ss.client.flush())
		ss.alive.pinged = now
	}

	ss.timer.Reset(ss.srv.tick())
}

// spendReset takes one client reset of an open stream from the session's budget; false: the
// budget is spent, the client is flooding.
func (ss *session) spendReset(now time.Time) bool {
	ss.resets = min(float64(resetBurst), ss.resets+now.Sub(ss.resetsAt).Seconds()*resetRate)
	ss.resetsAt = now

	if ss.resets < 1 {
		return false
	}

	ss.resets--

	return true
}

// abort closes every connection of the session without its lock: whatever write holds the
// lock fails at once, and the session's readers end it.
func (ss *session) abort() {
	ss.connsMu.Lock()
	defer ss.connsMu.Unlock()

	ss.aborted = true

	for c := range ss.conns {
		c.Close()
	}
}

// addConn records a connection for abort; a session already aborted closes it at once.
func (ss *session) addConn(c net.Conn) {
	ss.connsMu.Lock()
	defer ss.connsMu.Unlock()

	if ss.aborted {
		c.Close()
	}

	ss.conns[c] = struct{}{}
}

// dropConn forgets a connection that was closed.
func (ss *session) dropConn(c net.Conn) {
	ss.connsMu.Lock()
	defer ss.connsMu.Unlock()

	delete(ss.conns, c)
}
