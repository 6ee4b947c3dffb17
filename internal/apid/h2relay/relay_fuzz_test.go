package h2relay

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/talos-go/talos/internal/testenv"
)

// The fuzz route: /t/A goes to backend 0 acting as "reader", /t/B to backend 1 as "admin",
// anything else is refused. The route drops the client's own fuzzRole/fuzzTarget headers and
// adds its decision, as apid's route does with talos-role.
const (
	fuzzRole   = "x-role"
	fuzzTarget = "x-target"
)

var fuzzPaths = map[string]struct {
	backend int
	role    string
}{"/t/A": {0, "reader"}, "/t/B": {1, "admin"}}

func fuzzRoute(_ *tls.ConnectionState, h []hpack.HeaderField) Decision {
	var path string

	out := make([]hpack.HeaderField, 0, len(h)+2)

	for _, f := range h {
		if f.Name == ":path" {
			path = f.Value
		}

		if f.Name != fuzzRole && f.Name != fuzzTarget {
			out = append(out, f)
		}
	}

	p, ok := fuzzPaths[path]
	if !ok {
		return Decision{Code: int(codes.Unimplemented), Message: "no such method"}
	}

	out = append(out, hpack.HeaderField{Name: fuzzRole, Value: p.role}, hpack.HeaderField{Name: fuzzTarget, Value: fmt.Sprint(p.backend)})

	return Decision{Backend: p.backend, Header: out}
}

// seen is one call as a backend got it.
type seen struct {
	backend      int
	method       string
	role, target []string
}

// startRecorder serves a gRPC backend that records every call's method and routing metadata,
// then echoes its first message.
func startRecorder(tb testing.TB, index int, calls chan<- seen) string {
	tb.Helper()

	sock := filepath.Join(tb.TempDir(), fmt.Sprintf("b%d.sock", index))

	l, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}

	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		md, _ := metadata.FromIncomingContext(stream.Context())
		calls <- seen{backend: index, method: method, role: md.Get(fuzzRole), target: md.Get(fuzzTarget)}

		var m []byte
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}

		return stream.SendMsg(&m)
	}))

	go srv.Serve(l)

	tb.Cleanup(srv.Stop)

	return sock
}

// fuzzFrames encodes a client's frames after the preface (a seed).
func fuzzFrames(write func(fw *http2.Framer, enc func(...string) []byte)) []byte {
	var buf, hdr bytes.Buffer

	fw := http2.NewFramer(&buf, nil)
	he := hpack.NewEncoder(&hdr)
	enc := func(kv ...string) []byte {
		hdr.Reset()

		for i := 0; i+1 < len(kv); i += 2 {
			he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}

		return bytes.Clone(hdr.Bytes())
	}

	write(fw, enc)

	return buf.Bytes()
}

func call(path string, extra ...string) []string {
	return append([]string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "x", "content-type", "application/grpc"}, extra...)
}

// grpcMessage is one length-prefixed gRPC message.
func grpcMessage(payload string) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(payload))), payload...)
}

func relaySeeds() [][]byte {
	return [][]byte{
		fuzzFrames(func(fw *http2.Framer, enc func(...string) []byte) {
			fw.WriteSettings()
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(call("/t/A")...), EndHeaders: true})
			fw.WriteData(1, true, grpcMessage("hi"))
		}),
		// A role and a target asserted by the client, in the first block and in a CONTINUATION.
		fuzzFrames(func(fw *http2.Framer, enc func(...string) []byte) {
			block := enc(call("/t/A", fuzzRole, "admin", fuzzTarget, "1")...)
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:7], EndStream: true})
			fw.WriteContinuation(1, false, block[7:20])
			fw.WriteContinuation(1, true, block[20:])
		}),
		// Trailers that try to change the role after the call started; a second stream.
		fuzzFrames(func(fw *http2.Framer, enc func(...string) []byte) {
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(call("/t/B")...), EndHeaders: true})
			fw.WriteData(1, false, grpcMessage(""))
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(fuzzRole, "root", ":path", "/t/A"), EndHeaders: true, EndStream: true})
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(call("/t/C")...), EndHeaders: true, EndStream: true})
		}),
		// Settings at their edges, window updates, pings, a reset, padding, priority.
		fuzzFrames(func(fw *http2.Framer, enc func(...string) []byte) {
			fw.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1},
				http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
			fw.WriteWindowUpdate(0, 1<<30)
			fw.WritePing(false, [8]byte{1})
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: enc(call("/t/B")...), EndHeaders: true, PadLength: 3,
				Priority: http2.PriorityParam{StreamDep: 5, Weight: 9}})
			fw.WriteDataPadded(5, false, grpcMessage("x"), []byte{0, 0})
			fw.WriteWindowUpdate(5, 100)
			fw.WriteRSTStream(5, http2.ErrCodeCancel)
			fw.WriteGoAway(5, http2.ErrCodeNo, nil)
		}),
		// A CONTINUATION for a stream other than the open header block's.
		fuzzFrames(func(fw *http2.Framer, enc func(...string) []byte) {
			block := enc(call("/t/A")...)
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: block[:5]})
			fw.WriteContinuation(9, true, block[5:])
		}),
		fuzzFrames(func(fw *http2.Framer, enc func(...string) []byte) {
			fw.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 0})
			fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(call("/t/A")...), EndHeaders: true, EndStream: true})
		}),
	}
}

// FuzzClientFrames sends the real relay, over loopback, a client connection's preface followed
// by any bytes, then closes its writing half. Properties:
//   - every call a backend gets went to the backend its :path routes to and carries exactly
//     the role and target the route decided: no frame, header block, CONTINUATION sequence or
//     trailer a client sends can change them;
//   - whatever the bytes, the relay ends that connection (no hang), and a well-behaved client
//     on another connection keeps being served: a malformed frame closes its own connection only.
func FuzzClientFrames(f *testing.F) {
	for _, s := range relaySeeds() {
		f.Add(s)
	}

	calls := make(chan seen, 1024)
	_, addr := startRelayWith(f, &Server{Route: fuzzRoute, Window: 1 << 20},
		startRecorder(f, 0, calls), startRecorder(f, 1, calls))

	good := client(f, addr)

	check := func(t *testing.T) {
		for {
			select {
			case c := <-calls:
				p, ok := fuzzPaths[c.method]
				if !ok || c.backend != p.backend || !slices.Equal(c.role, []string{p.role}) || !slices.Equal(c.target, []string{fmt.Sprint(p.backend)}) {
					t.Fatalf("backend %d got %s with role %q target %q: not what the route decided", c.backend, c.method, c.role, c.target)
				}
			default:
				return
			}
		}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()

		// The relay writes while it reads: write from another goroutine, or both could block.
		go c.Write(append([]byte(http2.ClientPreface), data...)) // the relay may close early: fine

		// Read what the relay answers until it pauses (so replies to the calls go through the
		// relay too), then close the writing half: the relay must end the connection.
		// The replies to a few calls are small: a relay still writing after 8 MiB is looping.
		buf := make([]byte, 32<<10)
		for total := 0; ; {
			c.SetReadDeadline(time.Now().Add(2 * time.Millisecond))

			n, err := c.Read(buf)
			if err != nil {
				break
			}

			if total += n; total > 8<<20 {
				t.Fatalf("the relay keeps writing: %d bytes so far, starting %q", total, buf[:min(n, 64)])
			}
		}

		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))

		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("the relay did not end the connection after the client's last byte: %v", err)
		}

		ctx := testenv.Context(t, 10*time.Second)

		var reply []byte
		if err := good.Invoke(ctx, "/t/A", &[]byte{}, &reply); err != nil {
			t.Fatalf("another connection is no longer served: %v", err)
		}

		check(t)
	})
}

// A client's SETTINGS value outside RFC 9113's bounds ends its connection with a GOAWAY
// naming the error (the regression FuzzClientFrames found: MAX_FRAME_SIZE 0 hung the relay).
func TestInvalidClientSettingsEndConnection(t *testing.T) {
	calls := make(chan seen, 16)
	_, addr := startRelayWith(t, &Server{Route: fuzzRoute}, startRecorder(t, 0, calls), startRecorder(t, 1, calls))

	for _, s := range []http2.Setting{
		{ID: http2.SettingMaxFrameSize, Val: 0},
		{ID: http2.SettingMaxFrameSize, Val: 1 << 24},
		{ID: http2.SettingEnablePush, Val: 2},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}

		go c.Write(append([]byte(http2.ClientPreface), fuzzFrames(func(fw *http2.Framer, _ func(...string) []byte) { fw.WriteSettings(s) })...))

		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		fr := http2.NewFramer(nil, c)

		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%v: connection ended without GOAWAY: %v", s, err)
			}

			if ga, ok := f.(*http2.GoAwayFrame); ok {
				if ga.ErrCode != http2.ErrCodeProtocol {
					t.Errorf("%v: GOAWAY %v, want PROTOCOL_ERROR", s, ga.ErrCode)
				}

				break
			}
		}

		if _, err = fr.ReadFrame(); err == nil {
			t.Errorf("%v: connection still open after GOAWAY", s)
		}

		c.Close()
	}
}
