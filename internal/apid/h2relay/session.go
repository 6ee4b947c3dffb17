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
	"sync/atomic"
	"time"

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

// half is one direction of a stream: the request (client to backend) or the response.
//
// Flow control passes through a half; these hold whenever the session lock is free:
//   - every DATA byte the sending side sent on this stream is in exactly one place: in queue
//     (not yet sent on), in credit (sent on, or padding, and not yet credited back), or
//     credited back to the sending side with a WINDOW_UPDATE (credit, drop);
//   - nothing is written to the receiving side beyond win or its connection window, nor in
//     frames over its maximum frame size (pump);
//   - a header block queued after data leaves after it: trailers never overtake the body
//     (queue holds both, in order).
//
// So what a stream holds is bounded by the window this relay advertised for it, and a slow
// receiver stalls only its sender, never the relay's memory.
type half struct {
	queue   []item // frames waiting for the receiving side's window
	win     int64  // the receiving side's stream window: what pump may still send
	endSeen bool   // END_STREAM received from the sending side
	done    bool   // END_STREAM sent on
	credit  int64  // stream-level bytes sent on and not yet credited back to the sending side
}

// stream is one call: id on the client connection, bid on its backend connection.
type stream struct {
	id, bid     uint32
	up          *upstream
	req, resp   half
	headersSent bool // response headers queued for the client

	// A unary call's frames (request headers and data; response headers, data and trailers)
	// queue in these without allocating.
	reqBuf  [2]item
	respBuf [3]item
}

// direction is where one half of a stream runs: from one connection to the other.
type direction struct {
	src, dst     *peer  // the side its frames come from, the side they go to
	srcID, dstID uint32 // the stream's id on each
	buf          []item // the queue's own storage, reused when the queue empties
}

// ends returns the connections of one direction of st: the request runs from the client to
// the backend, the response back.
func (ss *session) ends(st *stream, h *half) direction {
	if h == &st.req {
		return direction{src: ss.client, dst: st.up.peer, srcID: st.id, dstID: st.bid, buf: st.reqBuf[:0]}
	}

	return direction{src: st.up.peer, dst: ss.client, srcID: st.bid, dstID: st.id, buf: st.respBuf[:0]}
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

	// Limits (limits.go): the watchdog's timer, the idle and keepalive state it reads, the
	// budget of stream resets.
	timer     *time.Timer
	ended     atomic.Bool  // closed, readable without mu
	reads     atomic.Int64 // frames read from the client
	idleSince time.Time    // when the last stream ended (or the session began)
	alive     keepalive
	resets    float64
	resetsAt  time.Time

	// Every connection of the session, for abort, which must not take mu.
	connsMu sync.Mutex
	conns   map[net.Conn]struct{}
	aborted bool
}

func newSession(s *Server, c net.Conn, state *tls.ConnectionState) *session {
	return &session{
		srv:      s,
		state:    state,
		client:   newPeer(c, s.writeTimeout()),
		streams:  map[uint32]*stream{},
		ups:      make([]*upstream, len(s.Backends)),
		thresh:   int64(s.window() / 4),
		resets:   resetBurst,
		resetsAt: time.Now(),
		conns:    map[net.Conn]struct{}{c: {}},
	}
}

// run reads the client connection until it ends.
func (ss *session) run() {
	defer ss.close()

	br, fr := newReader(ss.client.conn, ss.srv.maxHeaderList())

	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}

	ss.client.conn.SetDeadline(time.Time{}) //nolint:errcheck // serveConn's handshake deadline ends with the preface

	ss.mu.Lock()
	ss.writeSettings(ss.client,
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(ss.srv.maxStreams())},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: ss.srv.maxHeaderList()})
	ss.flushAll()
	ss.startWatchdog()
	ss.mu.Unlock()

	for {
		if br.Buffered() == 0 {
			ss.mu.Lock()
			ss.flushAll()
			ss.mu.Unlock()
		}

		f, err := fr.ReadFrame()
		ss.reads.Add(1)

		if ss.ended.Load() {
			return // closed by the relay (a limit, Stop): frames still buffered are dropped
		}

		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				ss.mu.Lock()
				if ss.streams[se.StreamID] == nil {
					// A new stream with a malformed header block: no one else will tell it.
					ss.client.check(ss.client.fw.WriteRSTStream(se.StreamID, se.Code))
				}

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
// window to the same size. The window is static: a peer may have at most Window bytes in
// flight to us per stream and per connection, and that is all a session ever buffers from it.
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
		p.conn.Close()
	}

	p.dirty = true
}

// clientHeaders opens a stream (or forwards a client's trailers). The backend is dialed
// outside the lock.
func (ss *session) clientHeaders(f *http2.MetaHeadersFrame) {
	id := f.StreamID

	ss.mu.Lock()

	if st, ok := ss.streams[id]; ok {
		if f.Truncated {
			ss.client.check(ss.client.fw.WriteRSTStream(id, http2.ErrCodeProtocol))
			ss.resetFromClient(id, http2.ErrCodeCancel)
		} else if !st.req.endSeen {
			ss.push(st, &st.req, item{header: f.Fields, isHdr: true, end: f.StreamEnded()})
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

	var d Decision

	if f.Truncated {
		// The framer stopped decoding at the limit: what Route would see is not the request.
		d.Code, d.Message = 8, fmt.Sprintf("request header list is larger than the %d bytes this server accepts (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE)", ss.srv.maxHeaderList()) // ResourceExhausted
	} else {
		d = ss.srv.Route(ss.state, f.Fields)
	}

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
			d.Code, d.Message = 14, "apid lost its connection to the backend before the call started; retry it"
		}

		ss.client.check(ss.client.writeHeaders(id, statusFields(true, d.Code, d.Message), true))

		if !f.StreamEnded() {
			ss.client.check(ss.client.fw.WriteRSTStream(id, http2.ErrCodeNo))
		}

		return
	}

	st := &stream{id: id, bid: up.nextID, up: up}
	st.req.win, st.resp.win = up.initWin, ss.client.initWin
	st.req.queue, st.resp.queue = st.reqBuf[:0], st.respBuf[:0]
	up.nextID += 2
	ss.streams[id] = st
	up.streams[st.bid] = st

	ss.push(st, &st.req, item{header: d.Header, isHdr: true, end: f.StreamEnded()})
}

// upstream returns the session's live connection to backend i, dialing it when needed.
func (ss *session) upstream(i int) (*upstream, error) {
	ss.mu.Lock()
	up := ss.ups[i]
	live := up != nil && !up.dead
	ss.mu.Unlock()

	if live {
		return up, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()

	c, err := ss.srv.Backends[i](ctx)
	if err != nil {
		return nil, err
	}

	up = &upstream{peer: newPeer(c, ss.srv.writeTimeout()), index: i, nextID: 1, streams: map[uint32]*stream{}}
	br, fr := newReader(c, backendMaxHeaderList)

	ss.mu.Lock()
	defer ss.mu.Unlock()

	if ss.closed {
		c.Close()

		return nil, net.ErrClosed
	}

	if _, err = up.bw.WriteString(http2.ClientPreface); err != nil {
		c.Close()

		return nil, err
	}

	ss.writeSettings(up.peer)
	ss.ups[i] = up
	ss.addConn(c)

	go ss.readUpstream(up, br, fr)

	return up, nil
}

// clientFrame handles every client frame but HEADERS.
func (ss *session) clientFrame(f http2.Frame) {
	switch f := f.(type) {
	case *http2.DataFrame:
		// What a client sends past its connection window would be queued without bound: end it.
		// (Backends are ours and trusted to keep to their window; clients are not.) recvConn
		// grows back only when credit sends a connection WINDOW_UPDATE.
		if ss.client.recvConn -= int64(f.Length); ss.client.recvConn < 0 {
			ss.client.check(ss.client.fw.WriteGoAway(ss.lastID, http2.ErrCodeFlowControl, nil))
			ss.client.check(ss.client.flush())
			ss.closeLocked()

			return
		}

		// Bytes nobody will forward are credited at once; so is padding, which is not sent on.
		st := ss.streams[f.StreamID]
		if st == nil || st.req.endSeen || st.req.done {
			ss.credit(ss.client, 0, nil, int64(f.Length))

			return
		}

		ss.credit(ss.client, st.id, &st.req, int64(f.Length)-int64(len(f.Data()))) // padding
		ss.push(st, &st.req, item{data: f.Data(), end: f.StreamEnded()})
	case *http2.RSTStreamFrame:
		if ss.streams[f.StreamID] != nil && !ss.spendReset(time.Now()) {
			ss.client.check(ss.client.fw.WriteGoAway(ss.lastID, http2.ErrCodeEnhanceYourCalm, []byte("too many stream resets")))
			ss.client.check(ss.client.flush())
			ss.closeLocked()

			return
		}

		ss.resetFromClient(f.StreamID, f.ErrCode)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			ss.client.sendConn += int64(f.Increment)

			for _, st := range ss.streams {
				ss.pump(st, &st.resp)
			}
		} else if st := ss.streams[f.StreamID]; st != nil {
			st.resp.win += int64(f.Increment)
			ss.pump(st, &st.resp)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}

		// A value RFC 9113 6.5.2 does not allow ends the connection: a MAX_FRAME_SIZE of 0
		// had the relay write empty CONTINUATION frames forever (found by FuzzClientFrames).
		if err := f.ForeachSetting(http2.Setting.Valid); err != nil {
			code := http2.ErrCodeProtocol

			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			}

			ss.client.check(ss.client.fw.WriteGoAway(ss.lastID, code, nil))
			ss.client.check(ss.client.flush())
			ss.closeLocked()

			return
		}

		ss.applySettings(ss.client, f, func(delta int64) {
			for _, st := range ss.streams {
				st.resp.win += delta
			}
		})
		ss.client.check(ss.client.fw.WriteSettingsAck())

		for _, st := range ss.streams {
			ss.pump(st, &st.resp)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			ss.client.check(ss.client.fw.WritePing(true, f.Data))
		}
	case *http2.GoAwayFrame:
		ss.goingAway = true // the client opens no more streams; it closes when done
	}
}

// applySettings takes a peer's SETTINGS; onWindow gets the change of its initial window,
// which RFC 9113 6.9.2 applies to every open stream's window, possibly taking it below zero:
// pump then sends nothing on that stream until WINDOW_UPDATEs bring it back above.
func (ss *session) applySettings(p *peer, f *http2.SettingsFrame, onWindow func(delta int64)) {
	f.ForeachSetting(func(s http2.Setting) error { //nolint:errcheck // the callback never fails
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
		if st == nil || st.resp.endSeen {
			return
		}

		st.headersSent = true
		ss.push(st, &st.resp, item{header: f.Fields, isHdr: true, end: f.StreamEnded()})
	case *http2.DataFrame:
		st := up.streams[f.StreamID]
		if st == nil || st.resp.endSeen {
			ss.credit(up.peer, 0, nil, int64(f.Length))

			return
		}

		ss.credit(up.peer, st.bid, &st.resp, int64(f.Length)-int64(len(f.Data()))) // padding
		ss.push(st, &st.resp, item{data: f.Data(), end: f.StreamEnded()})
	case *http2.RSTStreamFrame:
		ss.resetFromBackend(up, f.StreamID, f.ErrCode)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			up.sendConn += int64(f.Increment)

			for _, st := range up.streams {
				ss.pump(st, &st.req)
			}
		} else if st := up.streams[f.StreamID]; st != nil {
			st.req.win += int64(f.Increment)
			ss.pump(st, &st.req)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}

		ss.applySettings(up.peer, f, func(delta int64) {
			for _, st := range up.streams {
				st.req.win += delta
			}
		})
		up.check(up.fw.WriteSettingsAck())

		for _, st := range up.streams {
			ss.pump(st, &st.req)
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

// push queues one frame of a direction and sends what the windows allow. Data still queued
// afterwards is copied out of the framer's buffer, which the next read reuses. The bytes it
// queues are not credited to the sender until pump sends them on (or drop discards them):
// that is what bounds the queue by the window the sender was given.
func (ss *session) push(st *stream, h *half, it item) {
	h.endSeen = h.endSeen || it.end
	h.queue = append(h.queue, it)
	ss.pump(st, h)

	if n := len(h.queue); n > 0 && !h.queue[n-1].isHdr {
		h.queue[n-1].data = bytes.Clone(h.queue[n-1].data)
	}
}

// pump sends a direction's queued frames as far as the receiving side's windows allow, and
// credits what it sent back to the sending side. It is called whenever a window may have
// opened (a frame queued, a WINDOW_UPDATE, new SETTINGS) and keeps the send-side invariants:
// each DATA frame is at most min(stream window, connection window, max frame size) of the
// receiver, both windows are charged for it, and an END_STREAM goes out with the last byte.
// A header block needs no window and leaves as soon as the data before it has.
func (ss *session) pump(st *stream, h *half) {
	e := ss.ends(st, h)
	dst := e.dst

	for len(h.queue) > 0 && !dst.dead {
		it := &h.queue[0]

		if it.isHdr {
			dst.check(dst.writeHeaders(e.dstID, it.header, it.end))
		} else {
			n := min(int64(len(it.data)), dst.sendConn, h.win, int64(dst.maxFrame))
			if n <= 0 && len(it.data) > 0 {
				break
			}

			n = max(n, 0)
			last := n == int64(len(it.data))

			dst.check(dst.fw.WriteData(e.dstID, it.end && last, it.data[:n]))
			dst.sendConn -= n
			h.win -= n
			ss.credit(e.src, e.srcID, h, n)

			if !last {
				it.data = it.data[n:]

				continue
			}
		}

		if it.end {
			h.done = true
		}

		if h.queue = h.queue[1:]; len(h.queue) == 0 {
			h.queue = e.buf
		}
	}

	ss.maybeDone(st)
}

// credit returns n bytes received from src to its windows (h nil: the connection's only), in
// updates of at least a quarter window. It is the only place WINDOW_UPDATEs are sent to a
// peer, and it is called only for bytes that left the relay (sent on, padding, or discarded),
// so a peer's windows reopen exactly as fast as the relay drains what it sent. A stream that
// has ended on the sending side gets no more stream updates: it will send nothing more.
func (ss *session) credit(src *peer, id uint32, h *half, n int64) {
	if n <= 0 || src.dead {
		return
	}

	src.credit += n

	if src.credit >= ss.thresh {
		src.check(src.fw.WriteWindowUpdate(0, uint32(src.credit)))
		src.recvConn += src.credit
		src.credit = 0
	}

	if h != nil && !h.endSeen {
		h.credit += n

		if h.credit >= ss.thresh {
			src.check(src.fw.WriteWindowUpdate(id, uint32(h.credit)))
			h.credit = 0
		}
	}
}

// maybeDone forgets a stream both sides have finished. A reply that ended while the client
// was still sending ends the call: the client's stream is reset with NO_ERROR, as gRPC does.
func (ss *session) maybeDone(st *stream) {
	if !st.resp.done {
		return
	}

	if !st.req.done {
		if !st.up.dead && st.up.streams[st.bid] == st {
			return // the backend resets its side itself
		}

		ss.client.check(ss.client.fw.WriteRSTStream(st.id, http2.ErrCodeNo))
	}

	ss.forget(st)
}

// forget drops a stream, crediting back every byte still queued for either side.
func (ss *session) forget(st *stream) {
	ss.drop(st, &st.req)
	ss.drop(st, &st.resp)

	delete(ss.streams, st.id)

	if len(ss.streams) == 0 {
		ss.idleSince = time.Now()
	}

	if st.up.streams[st.bid] == st {
		delete(st.up.streams, st.bid)
	}

	if ss.goingAway && len(ss.streams) == 0 {
		ss.flushAll()
		ss.closeLocked()
	}
}

// drop discards a direction's queue, crediting its bytes back to the sending connection: a
// stream that ends with data still queued must not shrink the connection window for good.
func (ss *session) drop(st *stream, h *half) {
	src := ss.ends(st, h).src

	for _, it := range h.queue {
		ss.credit(src, 0, nil, int64(len(it.data)))
	}

	h.queue = nil
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
	up.conn.Close()
	ss.dropConn(up.conn)

	if ss.ups[up.index] == up {
		ss.ups[up.index] = nil
	}

	for _, st := range up.streams {
		ss.drop(st, &st.req)
		st.req.done = true

		delete(up.streams, st.bid)

		if !st.resp.endSeen {
			ss.push(st, &st.resp, item{header: statusFields(!st.headersSent, 14, "apid lost its connection to the backend during the call; retry it"), isHdr: true, end: true})
		} else {
			ss.pump(st, &st.resp)
		}
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
	ss.ended.Store(true)
	ss.client.dead = true
	ss.client.conn.Close()

	if ss.timer != nil {
		ss.timer.Stop()
	}

	for _, up := range ss.ups {
		if up != nil {
			up.dead = true
			up.conn.Close()
		}
	}

	// Backends whose connection was replaced still have readers; closing ends them too.
	for _, st := range ss.streams {
		st.up.dead = true
		st.up.conn.Close()
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
