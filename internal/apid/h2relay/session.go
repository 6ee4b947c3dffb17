package h2relay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// item is one frame's worth of a stream waiting for the receiving side's window: data, or a
// header block (response headers and trailers must not overtake data queued before them).
type item struct {
	data   []byte
	header []hpack.HeaderField
	isHdr  bool
	end    bool
}

// stream is one call: id on the client connection, bid on its backend connection.
type stream struct {
	id, bid uint32
	up      *upstream

	toBackend, toClient []item
	// A unary call's frames (request headers and data; response headers, data and trailers)
	// queue in these without allocating.
	backendBuf [2]item
	clientBuf  [3]item

	upWin   int64 // stream window towards the backend
	sendWin int64 // stream window towards the client

	reqEndSeen, respEndSeen bool // END_STREAM received from the client / the backend
	reqDone, respDone       bool // END_STREAM sent on to the backend / the client
	headersSent             bool // response headers queued for the client

	reqCredit, respCredit int64 // stream-level bytes to credit back to the client / backend
}

// upstream is one backend connection of a session.
type upstream struct {
	*peer

	index   int
	nextID  uint32
	streams map[uint32]*stream
}

// session is one client connection and the backend connections its streams use. Every
// field, and every write to any of its connections, is guarded by mu.
type session struct {
	srv   *Server
	state *tls.ConnectionState

	mu        sync.Mutex
	client    *peer
	streams   map[uint32]*stream
	ups       []*upstream
	lastID    uint32
	goingAway bool
	closed    bool
	thresh    int64
}

func newSession(s *Server, c net.Conn, state *tls.ConnectionState) *session {
	return &session{
		srv:     s,
		state:   state,
		client:  newPeer(c),
		streams: map[uint32]*stream{},
		ups:     make([]*upstream, len(s.Backends)),
		thresh:  int64(s.window() / 4),
	}
}

// run reads the client connection until it ends.
func (ss *session) run() {
	defer ss.close()

	br, fr := newReader(ss.client.conn)

	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}

	ss.mu.Lock()
	ss.writeSettings(ss.client, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(ss.srv.maxStreams())}) //nolint:gosec
	ss.flushAll()
	ss.mu.Unlock()

	for {
		if br.Buffered() == 0 {
			ss.mu.Lock()
			ss.flushAll()
			ss.mu.Unlock()
		}

		f, err := fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				ss.mu.Lock()
				ss.resetFromClient(se.StreamID, se.Code)
				ss.mu.Unlock()

				continue
			}

			ss.srv.logf("client connection ended", err)

			return
		}

		if hf, ok := f.(*http2.MetaHeadersFrame); ok {
			ss.clientHeaders(hf)

			continue
		}

		ss.mu.Lock()
		ss.clientFrame(f)
		ss.mu.Unlock()
	}
}

// writeSettings sends our SETTINGS (the stream window plus extra) and opens the connection
// window to the same size.
func (ss *session) writeSettings(p *peer, extra ...http2.Setting) {
	w := ss.srv.window()
	settings := append([]http2.Setting{{ID: http2.SettingInitialWindowSize, Val: w}}, extra...)

	p.check(p.fw.WriteSettings(settings...))

	if w > defaultWindow {
		p.check(p.fw.WriteWindowUpdate(0, w-defaultWindow))
		p.recvConn = int64(w)
	}
}

func (ss *session) flushAll() {
	ss.client.check(ss.client.flush())

	for _, up := range ss.ups {
		if up != nil {
			up.check(up.flush())
		}
	}
}

// check records a write error: the connection is closed and its reader cleans up.
func (p *peer) check(err error) {
	if err != nil && !p.dead {
		p.dead = true
		p.conn.Close() //nolint:errcheck
	}

	p.dirty = true
}

// clientHeaders opens a stream (or forwards a client's trailers). The backend is dialed
// outside the lock.
func (ss *session) clientHeaders(f *http2.MetaHeadersFrame) {
	id := f.StreamID

	ss.mu.Lock()

	if st, ok := ss.streams[id]; ok {
		if !st.reqEndSeen {
			st.reqEndSeen = f.StreamEnded()
			st.toBackend = append(st.toBackend, item{header: f.Fields, isHdr: true, end: f.StreamEnded()})
			ss.pumpToBackend(st)
		}

		ss.mu.Unlock()

		return
	}

	if id <= ss.lastID || id%2 == 0 {
		ss.mu.Unlock()

		return // a closed stream's late frame
	}

	ss.lastID = id

	if ss.goingAway || len(ss.streams) >= ss.srv.maxStreams() {
		ss.client.check(ss.client.fw.WriteRSTStream(id, http2.ErrCodeRefusedStream))
		ss.mu.Unlock()

		return
	}

	ss.mu.Unlock()

	d := ss.srv.Route(ss.state, f.Fields)
	if d.Code == 0 && (d.Backend < 0 || d.Backend >= len(ss.ups)) {
		d.Code, d.Message = 13, fmt.Sprintf("no backend %d", d.Backend)
	}

	var up *upstream

	if d.Code == 0 {
		var err error

		if up, err = ss.upstream(d.Backend); err != nil {
			d.Code, d.Message = 14, err.Error() // Unavailable
		}
	}

	ss.mu.Lock()
	defer ss.mu.Unlock()

	if d.Code != 0 || up.dead {
		if d.Code == 0 {
			d.Code, d.Message = 14, "backend connection lost"
		}

		ss.client.check(ss.client.writeHeaders(id, statusFields(true, d.Code, d.Message), true))

		if !f.StreamEnded() {
			ss.client.check(ss.client.fw.WriteRSTStream(id, http2.ErrCodeNo))
		}

		return
	}

	st := &stream{
		id:         id,
		bid:        up.nextID,
		up:         up,
		upWin:      up.initWin,
		sendWin:    ss.client.initWin,
		reqEndSeen: f.StreamEnded(),
	}
	st.toBackend, st.toClient = st.backendBuf[:0], st.clientBuf[:0]
	up.nextID += 2
	ss.streams[id] = st
	up.streams[st.bid] = st

	st.toBackend = append(st.toBackend, item{header: d.Header, isHdr: true, end: f.StreamEnded()})
	ss.pumpToBackend(st)
}

// upstream returns the session's live connection to backend i, dialing it when needed.
func (ss *session) upstream(i int) (*upstream, error) {
	ss.mu.Lock()
	up := ss.ups[i]
	ss.mu.Unlock()

	if up != nil && !up.dead {
		return up, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()

	c, err := ss.srv.Backends[i](ctx)
	if err != nil {
		return nil, err
	}

	up = &upstream{peer: newPeer(c), index: i, nextID: 1, streams: map[uint32]*stream{}}
	br, fr := newReader(c)

	ss.mu.Lock()
	defer ss.mu.Unlock()

	if ss.closed {
		c.Close() //nolint:errcheck

		return nil, net.ErrClosed
	}

	if _, err = up.bw.WriteString(http2.ClientPreface); err != nil {
		c.Close() //nolint:errcheck

		return nil, err
	}

	ss.writeSettings(up.peer)
	ss.ups[i] = up

	go ss.readUpstream(up, br, fr)

	return up, nil
}

// clientFrame handles every client frame but HEADERS.
func (ss *session) clientFrame(f http2.Frame) {
	switch f := f.(type) {
	case *http2.DataFrame:
		// What a client sends past its window would be queued without bound: end it.
		if ss.client.recvConn -= int64(f.Length); ss.client.recvConn < 0 {
			ss.client.check(ss.client.fw.WriteGoAway(ss.lastID, http2.ErrCodeFlowControl, nil))
			ss.client.check(ss.client.flush())
			ss.closeLocked()

			return
		}

		st := ss.streams[f.StreamID]
		data := f.Data()
		pad := int64(f.Length) - int64(len(data))

		if st == nil || st.reqEndSeen || st.reqDone {
			ss.creditClient(nil, int64(f.Length))

			return
		}

		ss.creditClient(st, pad)
		st.reqEndSeen = f.StreamEnded()
		st.toBackend = append(st.toBackend, item{data: data, end: f.StreamEnded()})
		ss.pumpToBackend(st)

		if n := len(st.toBackend); n > 0 && !st.toBackend[n-1].isHdr {
			st.toBackend[n-1].data = bytes.Clone(st.toBackend[n-1].data) // the framer reuses its buffer
		}
	case *http2.RSTStreamFrame:
		ss.resetFromClient(f.StreamID, f.ErrCode)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			ss.client.sendConn += int64(f.Increment)

			for _, st := range ss.streams {
				ss.pumpToClient(st)
			}
		} else if st := ss.streams[f.StreamID]; st != nil {
			st.sendWin += int64(f.Increment)
			ss.pumpToClient(st)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}

		ss.applySettings(ss.client, f, func(delta int64) {
			for _, st := range ss.streams {
				st.sendWin += delta
			}
		})
		ss.client.check(ss.client.fw.WriteSettingsAck())

		for _, st := range ss.streams {
			ss.pumpToClient(st)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			ss.client.check(ss.client.fw.WritePing(true, f.Data))
		}
	case *http2.GoAwayFrame:
		ss.goingAway = true // the client opens no more streams; it closes when done
	}
}

// applySettings takes a peer's SETTINGS; onWindow gets the change of its initial window.
func (ss *session) applySettings(p *peer, f *http2.SettingsFrame, onWindow func(delta int64)) {
	f.ForeachSetting(func(s http2.Setting) error { //nolint:errcheck
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - p.initWin
			p.initWin = int64(s.Val)
			onWindow(delta)
		case http2.SettingMaxFrameSize:
			p.maxFrame = s.Val
		case http2.SettingHeaderTableSize:
			p.enc.SetMaxDynamicTableSizeLimit(s.Val)
		}

		return nil
	})
}

// readUpstream reads one backend connection until it ends.
func (ss *session) readUpstream(up *upstream, br *bufio.Reader, fr *http2.Framer) {
	for {
		if br.Buffered() == 0 {
			ss.mu.Lock()
			ss.flushAll()
			ss.mu.Unlock()
		}

		f, err := fr.ReadFrame()

		ss.mu.Lock()

		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				ss.resetFromBackend(up, se.StreamID, se.Code)
				ss.mu.Unlock()

				continue
			}

			ss.srv.logf("backend connection ended", err)
			ss.failUpstream(up)
			ss.flushAll()
			ss.mu.Unlock()

			return
		}

		ss.backendFrame(up, f)
		ss.mu.Unlock()
	}
}

func (ss *session) backendFrame(up *upstream, f http2.Frame) {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		st := up.streams[f.StreamID]
		if st == nil || st.respEndSeen {
			return
		}

		st.respEndSeen = f.StreamEnded()
		st.headersSent = true
		st.toClient = append(st.toClient, item{header: f.Fields, isHdr: true, end: f.StreamEnded()})
		ss.pumpToClient(st)
	case *http2.DataFrame:
		st := up.streams[f.StreamID]
		data := f.Data()

		if st == nil || st.respEndSeen {
			ss.creditBackend(up, nil, int64(f.Length))

			return
		}

		ss.creditBackend(up, st, int64(f.Length)-int64(len(data)))
		st.respEndSeen = f.StreamEnded()
		st.toClient = append(st.toClient, item{data: data, end: f.StreamEnded()})
		ss.pumpToClient(st)

		if n := len(st.toClient); n > 0 && !st.toClient[n-1].isHdr {
			st.toClient[n-1].data = bytes.Clone(st.toClient[n-1].data)
		}
	case *http2.RSTStreamFrame:
		ss.resetFromBackend(up, f.StreamID, f.ErrCode)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			up.sendConn += int64(f.Increment)

			for _, st := range up.streams {
				ss.pumpToBackend(st)
			}
		} else if st := up.streams[f.StreamID]; st != nil {
			st.upWin += int64(f.Increment)
			ss.pumpToBackend(st)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}

		ss.applySettings(up.peer, f, func(delta int64) {
			for _, st := range up.streams {
				st.upWin += delta
			}
		})
		up.check(up.fw.WriteSettingsAck())

		for _, st := range up.streams {
			ss.pumpToBackend(st)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			up.check(up.fw.WritePing(true, f.Data))
		}
	case *http2.GoAwayFrame:
		// The backend takes no new streams: later ones dial afresh; the ones it never saw
		// are refused, which gRPC clients retry.
		if ss.ups[up.index] == up {
			ss.ups[up.index] = nil
		}

		for bid := range up.streams {
			if bid > f.LastStreamID {
				ss.resetFromBackend(up, bid, http2.ErrCodeRefusedStream)
			}
		}
	}
}

// pumpToBackend sends a stream's queued request frames as far as the backend's windows allow.
func (ss *session) pumpToBackend(st *stream) {
	up := st.up

	for len(st.toBackend) > 0 && !up.dead {
		it := &st.toBackend[0]

		if it.isHdr {
			up.check(up.writeHeaders(st.bid, it.header, it.end))
		} else {
			n := min(int64(len(it.data)), up.sendConn, st.upWin, int64(up.maxFrame))
			if n <= 0 && len(it.data) > 0 {
				break
			}

			n = max(n, 0)
			last := n == int64(len(it.data))

			up.check(up.fw.WriteData(st.bid, it.end && last, it.data[:n]))
			up.sendConn -= n
			st.upWin -= n
			ss.creditClient(st, n)

			if !last {
				it.data = it.data[n:]

				continue
			}
		}

		if it.end {
			st.reqDone = true
		}

		st.toBackend = st.toBackend[1:]

		if len(st.toBackend) == 0 {
			st.toBackend = st.backendBuf[:0]
		}
	}

	ss.maybeDone(st)
}

// pumpToClient sends a stream's queued response frames as far as the client's windows allow.
func (ss *session) pumpToClient(st *stream) {
	c := ss.client

	for len(st.toClient) > 0 && !c.dead {
		it := &st.toClient[0]

		if it.isHdr {
			c.check(c.writeHeaders(st.id, it.header, it.end))
		} else {
			n := min(int64(len(it.data)), c.sendConn, st.sendWin, int64(c.maxFrame))
			if n <= 0 && len(it.data) > 0 {
				break
			}

			n = max(n, 0)
			last := n == int64(len(it.data))

			c.check(c.fw.WriteData(st.id, it.end && last, it.data[:n]))
			c.sendConn -= n
			st.sendWin -= n
			ss.creditBackend(st.up, st, n)

			if !last {
				it.data = it.data[n:]

				continue
			}
		}

		if it.end {
			st.respDone = true
		}

		st.toClient = st.toClient[1:]

		if len(st.toClient) == 0 {
			st.toClient = st.clientBuf[:0]
		}
	}

	ss.maybeDone(st)
}

// creditClient returns n received bytes to the client's windows (st nil: connection only),
// in updates of at least a quarter window.
func (ss *session) creditClient(st *stream, n int64) {
	if n <= 0 {
		return
	}

	c := ss.client
	c.credit += n

	if c.credit >= ss.thresh {
		c.check(c.fw.WriteWindowUpdate(0, uint32(c.credit))) //nolint:gosec
		c.recvConn += c.credit
		c.credit = 0
	}

	if st != nil && !st.reqEndSeen {
		st.reqCredit += n

		if st.reqCredit >= ss.thresh {
			c.check(c.fw.WriteWindowUpdate(st.id, uint32(st.reqCredit))) //nolint:gosec
			st.reqCredit = 0
		}
	}
}

// creditBackend returns n received bytes to a backend's windows.
func (ss *session) creditBackend(up *upstream, st *stream, n int64) {
	if n <= 0 || up.dead {
		return
	}

	up.credit += n

	if up.credit >= ss.thresh {
		up.check(up.fw.WriteWindowUpdate(0, uint32(up.credit))) //nolint:gosec
		up.credit = 0
	}

	if st != nil && !st.respEndSeen {
		st.respCredit += n

		if st.respCredit >= ss.thresh {
			up.check(up.fw.WriteWindowUpdate(st.bid, uint32(st.respCredit))) //nolint:gosec
			st.respCredit = 0
		}
	}
}

// maybeDone forgets a stream both sides have finished. A reply that ended while the client
// was still sending ends the call: the client's stream is reset with NO_ERROR, as gRPC does.
func (ss *session) maybeDone(st *stream) {
	if !st.respDone {
		return
	}

	if !st.reqDone {
		if !st.up.dead && st.up.streams[st.bid] == st {
			return // the backend resets its side itself
		}

		ss.client.check(ss.client.fw.WriteRSTStream(st.id, http2.ErrCodeNo))
	}

	ss.forget(st)
}

// forget drops a stream, crediting back every byte still queued for either side.
func (ss *session) forget(st *stream) {
	for _, it := range st.toBackend {
		ss.creditClient(nil, int64(len(it.data)))
	}

	for _, it := range st.toClient {
		ss.creditBackend(st.up, nil, int64(len(it.data)))
	}

	st.toBackend, st.toClient = nil, nil

	delete(ss.streams, st.id)

	if st.up.streams[st.bid] == st {
		delete(st.up.streams, st.bid)
	}

	if ss.goingAway && len(ss.streams) == 0 {
		ss.flushAll()
		ss.closeLocked()
	}
}

func (ss *session) resetFromClient(id uint32, code http2.ErrCode) {
	st := ss.streams[id]
	if st == nil {
		return
	}

	if !st.up.dead && st.up.streams[st.bid] == st {
		st.up.check(st.up.fw.WriteRSTStream(st.bid, code))
	}

	ss.forget(st)
}

func (ss *session) resetFromBackend(up *upstream, bid uint32, code http2.ErrCode) {
	st := up.streams[bid]
	if st == nil {
		return
	}

	ss.client.check(ss.client.fw.WriteRSTStream(st.id, code))
	ss.forget(st)
}

// failUpstream ends every call on a backend connection that broke: each gets UNAVAILABLE
// after whatever the backend had already sent.
func (ss *session) failUpstream(up *upstream) {
	up.dead = true
	up.conn.Close() //nolint:errcheck

	if ss.ups[up.index] == up {
		ss.ups[up.index] = nil
	}

	for _, st := range up.streams {
		for _, it := range st.toBackend {
			ss.creditClient(nil, int64(len(it.data)))
		}

		st.toBackend = nil
		st.reqDone = true

		if !st.respEndSeen {
			st.respEndSeen = true
			st.toClient = append(st.toClient, item{header: statusFields(!st.headersSent, 14, "backend connection lost"), isHdr: true, end: true})
		}

		delete(up.streams, st.bid)
		ss.pumpToClient(st)
	}
}

// goAway tells the client to open no new streams; the session closes once its calls end.
func (ss *session) goAway() {
	ss.mu.Lock()
	defer ss.mu.Unlock()

	ss.goingAway = true

	ss.client.check(ss.client.fw.WriteGoAway(ss.lastID, http2.ErrCodeNo, nil))
	ss.flushAll()

	if len(ss.streams) == 0 {
		ss.closeLocked()
	}
}

func (ss *session) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()

	ss.closeLocked()
}

func (ss *session) closeLocked() {
	if ss.closed {
		return
	}

	ss.closed = true
	ss.client.dead = true
	ss.client.conn.Close() //nolint:errcheck

	for _, up := range ss.ups {
		if up != nil {
			up.dead = true
			up.conn.Close() //nolint:errcheck
		}
	}

	// Backends whose connection was replaced still have readers; closing ends them too.
	for _, st := range ss.streams {
		st.up.dead = true
		st.up.conn.Close() //nolint:errcheck
	}
}

// statusFields is a gRPC status as trailers (with the response headers when trailersOnly).
func statusFields(trailersOnly bool, code int, msg string) []hpack.HeaderField {
	var f []hpack.HeaderField

	if trailersOnly {
		f = append(f, hpack.HeaderField{Name: ":status", Value: "200"}, hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	}

	f = append(f, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(code)})

	if msg != "" {
		f = append(f, hpack.HeaderField{Name: "grpc-message", Value: percentEncode(msg)})
	}

	return f
}

// percentEncode escapes a grpc-message as the gRPC HTTP/2 protocol requires.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"

	var b []byte

	for i := range len(s) {
		c := s[i]

		if c >= 0x20 && c <= 0x7e && c != '%' {
			b = append(b, c)

			continue
		}

		b = append(b, '%', hex[c>>4], hex[c&15])
	}

	return string(b)
}
