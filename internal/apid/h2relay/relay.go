// Package h2relay forwards gRPC calls between HTTP/2 connections frame by frame. Every stream
// a client opens goes, with headers rewritten by the caller's Route, to one of the backends;
// the backend's frames come back unchanged. Messages are never decoded, no goroutine is made
// per call, and frames that arrive together leave in one socket write: the cheapest hop a
// gateway can add in front of a gRPC server (apid's local calls go through here).
//
// Each client connection gets its own backend connections, dialed on first use, so a slow or
// stuck client can only stall itself. Flow control is passed through: a client's bytes are
// credited back to it only once the backend has been sent them, and the other way round, so
// the memory a connection holds is bounded by the windows it advertises.
//
// A client is held to limits (limits.go): every write has a deadline, so a peer that stops
// reading is cut off instead of holding its session; a connection with no stream for a while
// is closed, and a silent one is pinged and closed if it stays silent; header lists have a
// size limit; a client resetting streams faster than a budget allows is cut off (the HTTP/2
// rapid-reset attack). Stop never waits on a stuck session: it closes the connections.
package h2relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Decision is where a new stream goes.
type Decision struct {
	// Backend indexes Server.Backends.
	Backend int
	// Header is the request header block to send on, pseudo-headers first.
	Header []hpack.HeaderField
	// Code, when not 0 (OK), answers the call at once with this gRPC status and Message:
	// nothing is forwarded.
	Code    int
	Message string
}

// Route picks a new stream's backend. state is the client's verified TLS state.
type Route func(state *tls.ConnectionState, header []hpack.HeaderField) Decision

// Dialer opens a connection to a backend that speaks HTTP/2 without TLS (h2c).
type Dialer func(ctx context.Context) (net.Conn, error)

// Server relays the connections it accepts.
type Server struct {
	// TLS terminates client connections (must negotiate h2); nil serves plain h2c.
	TLS *tls.Config
	// Backends are dialed by index, per client connection, when a stream first needs one.
	Backends []Dialer
	// Route decides every new stream.
	Route Route
	// Window is the flow-control window advertised for each stream and connection.
	Window uint32
	// MaxStreams bounds concurrent streams per client connection (default 1024).
	MaxStreams int
	// MaxHeaderListSize bounds a client's request header list, as HTTP/2 counts it (default
	// 1 MiB); a larger one is answered ResourceExhausted.
	MaxHeaderListSize uint32
	// WriteTimeout bounds every write to a client or backend connection (default 20s): a peer
	// that stops reading is disconnected once its socket buffers are full for that long.
	WriteTimeout time.Duration
	// IdleTimeout closes a client connection that has had no stream for this long (default 5m).
	IdleTimeout time.Duration
	// KeepaliveTime is how long a client may send nothing before it is pinged (default 1m);
	// KeepaliveTimeout how long it then has to send anything (the ping's ack) before it is
	// disconnected (default 20s).
	KeepaliveTime, KeepaliveTimeout time.Duration
	// Log gets connection-level failures; never payloads or headers.
	Log *zap.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{}
	stopping  bool
	idle      chan struct{} // closed when a stopping server has no sessions left
}

const (
	handshakeTimeout = 10 * time.Second
	dialTimeout      = 5 * time.Second
	defaultWindow    = 65535
	defaultMaxFrame  = 16384
)

var errStopped = errors.New("h2relay: server stopped")

// Serve accepts connections on l until Stop or Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()

	if s.stopping {
		s.mu.Unlock()
		l.Close()

		return errStopped
	}

	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
		s.sessions = map[*session]struct{}{}
	}

	s.listeners[l] = struct{}{}
	s.mu.Unlock()

	var backoff time.Duration

	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()

			if stopping {
				return errStopped
			}

			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)

				continue
			}

			return err
		}

		backoff = 0

		go s.serveConn(c)
	}
}

func (s *Server) serveConn(c net.Conn) {
	var state *tls.ConnectionState

	// A client has handshakeTimeout for the TLS handshake and the HTTP/2 preface together: one
	// that connects and sends nothing is dropped. The session clears the deadline after the
	// preface.
	c.SetDeadline(time.Now().Add(handshakeTimeout)) //nolint:errcheck // fails only on a closed conn, which the handshake reports

	if s.TLS != nil {
		tc := tls.Server(c, s.TLS)

		if err := tc.Handshake(); err != nil {
			c.Close()

			return
		}

		st := tc.ConnectionState()
		state = &st
		c = tc
	}

	sess := newSession(s, c, state)

	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		c.Close()

		return
	}

	s.sessions[sess] = struct{}{}
	s.mu.Unlock()

	sess.run()

	s.mu.Lock()
	delete(s.sessions, sess)

	if s.stopping && len(s.sessions) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
}

// Stop closes the listeners, tells every client to open no new streams, waits up to timeout
// for the calls in flight, then closes what is left. It never waits on a session's lock: the
// GOAWAYs go out from goroutines of their own, and what is left after timeout is ended by
// closing its connections, which fails any write a stuck session is blocked in.
func (s *Server) Stop(timeout time.Duration) {
	s.mu.Lock()
	s.stopping = true

	for l := range s.listeners {
		l.Close()
	}

	idle := make(chan struct{})
	if len(s.sessions) == 0 {
		close(idle)
	} else {
		s.idle = idle
	}

	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()

	for _, sess := range sessions {
		go sess.goAway()
	}

	select {
	case <-idle:
	case <-time.After(timeout):
		for _, sess := range sessions {
			sess.abort()
		}

		<-idle
	}
}

func (s *Server) window() uint32 {
	if s.Window == 0 {
		return defaultWindow
	}

	return s.Window
}

func (s *Server) maxStreams() int {
	if s.MaxStreams == 0 {
		return 1024
	}

	return s.MaxStreams
}

func (s *Server) logf(msg string, err error) {
	if s.Log != nil && err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.Log.Debug(msg, zap.Error(err))
	}
}

// peer is one side of the relay: the client connection or a backend connection. It owns the
// writing half (used under the session lock) and the window we may still send into.
type peer struct {
	conn     net.Conn
	bw       *bufio.Writer
	fw       *http2.Framer
	enc      *hpack.Encoder
	encBuf   []byte
	dirty    bool // written since the last flush
	dead     bool
	maxFrame uint32 // largest frame this peer accepts (its SETTINGS_MAX_FRAME_SIZE)

	// What we send this peer: sendConn is charged by pump for every DATA byte and refilled by
	// the peer's connection WINDOW_UPDATEs; initWin starts each new stream's window.
	sendConn int64
	initWin  int64

	// What this peer sends us: credit is what it sent that has left the relay (sent on,
	// padding, discarded) but was not yet credited back to it (session.credit). For the
	// client, whose reads are checked, recvConn is what it may still send: recvConn, credit
	// and the bytes queued from it add up to the window we advertised, and a client that
	// sends past it is cut off (session.clientFrame). Backends are ours and trusted.
	credit   int64
	recvConn int64
}

type hpackSink struct{ p *peer }

func (h hpackSink) Write(b []byte) (int, error) {
	h.p.encBuf = append(h.p.encBuf, b...)

	return len(b), nil
}

func newPeer(c net.Conn, writeTimeout time.Duration) *peer {
	p := &peer{conn: c, maxFrame: defaultMaxFrame, sendConn: defaultWindow, initWin: defaultWindow, recvConn: defaultWindow}
	p.bw = bufio.NewWriterSize(deadlineWriter{c: c, timeout: writeTimeout}, 32<<10)
	p.fw = http2.NewFramer(p.bw, nil)
	p.enc = hpack.NewEncoder(hpackSink{p})

	return p
}

func newReader(c net.Conn, maxHeaderList uint32) (*bufio.Reader, *http2.Framer) {
	br := bufio.NewReaderSize(c, 32<<10)
	fr := http2.NewFramer(nil, br)
	// The relay advertises no SETTINGS_MAX_FRAME_SIZE, so peers keep to the default: a larger
	// frame is an error, not a 16 MiB read buffer.
	fr.SetMaxReadFrameSize(defaultMaxFrame)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxHeaderList

	return br, fr
}

// writeHeaders encodes a header block and writes it as HEADERS plus CONTINUATION frames.
func (p *peer) writeHeaders(id uint32, fields []hpack.HeaderField, end bool) error {
	p.encBuf = p.encBuf[:0]

	for _, f := range fields {
		if err := p.enc.WriteField(f); err != nil {
			return err
		}
	}

	block := p.encBuf
	first := true

	for {
		n := min(len(block), int(p.maxFrame))
		chunk, rest := block[:n], block[n:]

		var err error

		if first {
			err = p.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndStream: end, EndHeaders: len(rest) == 0})
			first = false
		} else {
			err = p.fw.WriteContinuation(id, len(rest) == 0, chunk)
		}

		if err != nil {
			return err
		}

		if len(rest) == 0 {
			break
		}

		block = rest
	}

	p.dirty = true

	return nil
}

func (p *peer) flush() error {
	if !p.dirty || p.dead {
		return nil
	}

	p.dirty = false

	return p.bw.Flush()
}
