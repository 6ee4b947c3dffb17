package h2relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// rawClient speaks HTTP/2 frame by frame, as a hostile client would.
type rawClient struct {
	c    net.Conn
	fw   *http2.Framer
	hdr  bytes.Buffer
	enc  *hpack.Encoder
	next uint32
}

// dialRaw connects, sends the preface and SETTINGS, and reads nothing.
func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	r := &rawClient{c: c, fw: http2.NewFramer(c, c), next: 1}
	r.enc = hpack.NewEncoder(&r.hdr)
	r.fw.ReadMetaHeaders = hpack.NewDecoder(4096, nil)

	if _, err = c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}

	if err = r.fw.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}

	return r
}

// open starts a gRPC call of path with one request message and returns its stream id.
func (r *rawClient) open(t *testing.T, path string, msg []byte, extra ...hpack.HeaderField) uint32 {
	t.Helper()

	id, err := r.openErr(path, msg, extra...)
	if err != nil {
		t.Fatal(err)
	}

	return id
}

func (r *rawClient) openErr(path string, msg []byte, extra ...hpack.HeaderField) (uint32, error) {
	id := r.next
	r.next += 2

	r.hdr.Reset()

	fields := append([]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
		{Name: ":authority", Value: "x"}, {Name: "content-type", Value: "application/grpc+relaytest"}, {Name: "te", Value: "trailers"},
	}, extra...)

	for _, f := range fields {
		r.enc.WriteField(f)
	}

	block := r.hdr.Bytes()
	first := true

	for len(block) > 0 || first {
		n := min(len(block), 16384)
		chunk, rest := block[:n], block[n:]

		var err error
		if first {
			err = r.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndHeaders: len(rest) == 0})
			first = false
		} else {
			err = r.fw.WriteContinuation(id, len(rest) == 0, chunk)
		}

		if err != nil {
			return 0, err
		}

		block = rest
	}

	if msg != nil {
		framed := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
		if err := r.fw.WriteData(id, true, append(framed, msg...)); err != nil {
			return 0, err
		}
	}

	return id, nil
}

// until reads frames until match says so, failing after timeout or when the connection ends.
func (r *rawClient) until(t *testing.T, timeout time.Duration, match func(http2.Frame) bool) {
	t.Helper()

	r.c.SetReadDeadline(time.Now().Add(timeout))
	defer r.c.SetReadDeadline(time.Time{})

	for {
		f, err := r.fw.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended (or timed out) before the frame expected: %v", err)
		}

		if match(f) {
			return
		}
	}
}

// closedWithin reports whether the relay closed the connection within timeout, answering
// pings on the way when ack is set.
func (r *rawClient) closedWithin(timeout time.Duration, ack bool) (bool, []http2.Frame) {
	r.c.SetReadDeadline(time.Now().Add(timeout))

	var seen []http2.Frame

	for {
		f, err := r.fw.ReadFrame()
		if err != nil {
			var ne net.Error

			return !errors.As(err, &ne) || !ne.Timeout(), seen
		}

		if p, ok := f.(*http2.PingFrame); ok && ack && !p.IsAck() {
			r.fw.WritePing(true, p.Data)
		}

		seen = append(seen, f)
	}
}

func sessions(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()

	return len(s.sessions)
}

// stuck reports whether s's one session holds its lock for all of d: blocked in a write.
func stuck(s *Server, d time.Duration) bool {
	s.mu.Lock()

	var ss *session
	for one := range s.sessions {
		ss = one
	}
	s.mu.Unlock()

	if ss == nil {
		return false
	}

	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ss.mu.TryLock() {
			ss.mu.Unlock()

			return false
		}
	}

	return true
}

// A client that opens huge windows, asks for far more than the socket buffers hold and never
// reads: the relay's writes block. Stop still returns at once (it closes the connection rather
// than wait for the session's lock), and without a Stop the write deadline ends the session.
func TestStuckReaderIsCutOff(t *testing.T) {
	b := startBackend(t)

	for _, tc := range []struct {
		name         string
		writeTimeout time.Duration
		stop         bool
	}{
		{"write deadline", 300 * time.Millisecond, false},
		{"stop", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{Route: toFirst, Window: 1 << 20, WriteTimeout: tc.writeTimeout}
			_, addr := startRelayWith(t, s, b.sock)

			r := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
			if err := r.fw.WriteWindowUpdate(0, 1<<30); err != nil {
				t.Fatal(err)
			}

			for range 4 {
				r.open(t, "/t/Download", []byte{200}) // 200 MiB each
			}

			// The relay fills the socket buffers and blocks in a write, holding the session's lock.
			deadline := time.Now().Add(10 * time.Second)
			for !stuck(s, min(tc.writeTimeout/2, 500*time.Millisecond)) {
				if time.Now().After(deadline) {
					t.Fatal("the relay never blocked writing to a client that reads nothing")
				}
			}

			if tc.stop {
				stopped := make(chan struct{})

				go func() {
					s.Stop(100 * time.Millisecond)
					close(stopped)
				}()

				select {
				case <-stopped:
				case <-time.After(10 * time.Second):
					t.Fatal("Stop blocked on the stuck session for 10s")
				}

				return
			}

			deadline = time.Now().Add(15 * time.Second)
			for sessions(s) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("stuck session still open 15s after a write deadline of %v", tc.writeTimeout)
				}

				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// A connection with no stream is closed with GOAWAY after IdleTimeout; one that answers its
// keepalive pings with a call open stays; one that does not answer is closed.
func TestIdleAndKeepalive(t *testing.T) {
	b := startBackend(t)

	t.Run("idle", func(t *testing.T) {
		_, addr := startRelayWith(t, &Server{Route: toFirst, IdleTimeout: 300 * time.Millisecond}, b.sock)
		r := dialRaw(t, addr)

		r.until(t, 10*time.Second, func(f http2.Frame) bool {
			ga, ok := f.(*http2.GoAwayFrame)

			return ok && ga.ErrCode == http2.ErrCodeNo && string(ga.DebugData()) == "idle"
		})

		if closed, _ := r.closedWithin(5*time.Second, false); !closed {
			t.Fatal("idle connection still open after its GOAWAY")
		}
	})

	keepalive := &Server{Route: toFirst, KeepaliveTime: 200 * time.Millisecond, KeepaliveTimeout: 300 * time.Millisecond}
	_, addr := startRelayWith(t, keepalive, b.sock)

	t.Run("answered", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.open(t, "/t/Hang", nil)

		closed, seen := r.closedWithin(2*time.Second, true)
		if closed {
			t.Fatal("a client answering its pings was disconnected")
		}

		pings := 0

		for _, f := range seen {
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				pings++
			}
		}

		if pings == 0 {
			t.Fatal("a silent client was never pinged")
		}
	})

	t.Run("silent", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.open(t, "/t/Hang", nil)

		if closed, _ := r.closedWithin(5*time.Second, false); !closed {
			t.Fatal("a client that never answers its pings is still connected after 5s")
		}
	})
}

// A client that opens streams only to reset them is cut off with ENHANCE_YOUR_CALM once past
// its budget, and the backend saw a bounded number of calls.
func TestRapidResetCutOff(t *testing.T) {
	b := startBackend(t)
	_, addr := startRelay(t, toFirst, 0, b.sock)
	r := dialRaw(t, addr)

	const flood = 20000

	start := time.Now()

	go func() {
		for range flood {
			id, err := r.openErr("/t/Hang", nil)
			if err != nil || r.fw.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return // cut off
			}
		}
	}()

	r.until(t, 30*time.Second, func(f http2.Frame) bool {
		ga, ok := f.(*http2.GoAwayFrame)

		return ok && ga.ErrCode == http2.ErrCodeEnhanceYourCalm
	})

	elapsed := time.Since(start)
	limit := int64(resetBurst + resetRate*elapsed.Seconds() + 100)

	// The backend may still be starting handlers for streams it was sent before the cut.
	time.Sleep(200 * time.Millisecond)

	if got := b.started.Load(); got > limit {
		t.Fatalf("backend started %d calls for a reset flood cut off after %v; want at most %d", got, elapsed, limit)
	} else {
		t.Logf("flood of %d reset streams cut off after %v; the backend started %d calls", flood, elapsed, got)
	}
}

// A request header list over the limit is answered ResourceExhausted, naming the limit; the
// connection stays usable.
func TestHeaderListLimit(t *testing.T) {
	b := startBackend(t)
	_, addr := startRelayWith(t, &Server{Route: toFirst, MaxHeaderListSize: 64 << 10}, b.sock)
	r := dialRaw(t, addr)

	// 4,000 copies of one small field: about 4 KiB on the wire, 144 KiB as HTTP/2 counts a
	// header list (32 bytes per field): hpack's amplification, which the limit is about.
	var many []hpack.HeaderField
	for range 4000 {
		many = append(many, hpack.HeaderField{Name: "x-a", Value: "b"})
	}

	id := r.open(t, "/t/Echo", []byte("x"), many...)

	var got []hpack.HeaderField

	r.until(t, 10*time.Second, func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		if ok && h.StreamID == id {
			got = h.Fields
		}

		return ok && h.StreamID == id
	})

	var code, msg string

	for _, f := range got {
		switch f.Name {
		case "grpc-status":
			code = f.Value
		case "grpc-message":
			msg = f.Value
		}
	}

	if code != "8" || !strings.Contains(msg, "65536") {
		t.Fatalf("oversized headers answered grpc-status %q (want %d), message %q", code, codes.ResourceExhausted, msg)
	}

	id = r.open(t, "/t/Echo", []byte("x"))

	r.until(t, 10*time.Second, func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)

		return ok && d.StreamID == id
	})
}
