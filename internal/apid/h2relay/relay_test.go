package h2relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/testenv"
)

// bytesCodec carries messages as raw bytes, so the tests need no generated service.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

func (bytesCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = bytes.Clone(data)

	return nil
}

func (bytesCodec) Name() string { return "relaytest" }

func init() { encoding.RegisterCodec(bytesCodec{}) }

// backend is a real gRPC server on a unix socket; its methods are in handle.
type backend struct {
	sock     string
	srv      *grpc.Server
	canceled atomic.Int32 // streams whose context ended by cancellation
	started  atomic.Int64 // calls the handler was started for
	seenMD   chan metadata.MD
}

func startBackend(t *testing.T) *backend {
	t.Helper()

	b := &backend{sock: filepath.Join(t.TempDir(), "b.sock"), seenMD: make(chan metadata.MD, 100)}

	l, err := net.Listen("unix", b.sock)
	if err != nil {
		t.Fatal(err)
	}

	b.srv = grpc.NewServer(grpc.UnknownServiceHandler(b.handle), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))

	go b.srv.Serve(l)

	t.Cleanup(b.srv.Stop)

	return b
}

// handle: /t/Echo echoes one message; /t/Download sends N messages of 1 MiB (N = first byte
// of the request); /t/Upload counts the bytes of every message and replies with the total;
// /t/Hang waits for cancellation.
func (b *backend) handle(_ any, stream grpc.ServerStream) error {
	b.started.Add(1)

	method, _ := grpc.MethodFromServerStream(stream)
	md, _ := metadata.FromIncomingContext(stream.Context())

	select {
	case b.seenMD <- md:
	default:
	}

	switch method {
	case "/t/Echo":
		var m []byte
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}

		return stream.SendMsg(&m)
	case "/t/Download":
		var m []byte
		if err := stream.RecvMsg(&m); err != nil {
			return err
		}

		for i := range int(m[0]) {
			chunk := bytes.Repeat([]byte{'d'}, 1<<20) // gRPC may still hold the last one
			chunk[0] = byte(i)

			if err := stream.SendMsg(&chunk); err != nil {
				return err
			}
		}

		return nil
	case "/t/Upload":
		total := 0

		for {
			var m []byte

			err := stream.RecvMsg(&m)
			if errors.Is(err, io.EOF) {
				reply := fmt.Appendf(nil, "%d", total)

				return stream.SendMsg(&reply)
			}

			if err != nil {
				return err
			}

			total += len(m)
		}
	case "/t/Hang":
		<-stream.Context().Done()

		if errors.Is(stream.Context().Err(), context.Canceled) {
			b.canceled.Add(1)
		}

		return stream.Context().Err()
	}

	return status.Error(codes.Unimplemented, method)
}

// startRelay serves the relay on a loopback port in front of the backends, with route deciding.
func startRelay(t *testing.T, route Route, window uint32, backends ...string) (*Server, string) {
	t.Helper()

	return startRelayWith(t, &Server{Route: route, Window: window}, backends...)
}

// startRelayWith serves s on a loopback port in front of the backends.
func startRelayWith(t testing.TB, s *Server, backends ...string) (*Server, string) {
	t.Helper()

	for _, sock := range backends {
		s.Backends = append(s.Backends, func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		})
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})

	go func() {
		defer close(done)

		s.Serve(l)
	}()

	t.Cleanup(func() {
		s.Stop(time.Second)
		<-done
	})

	return s, l.Addr().String()
}

func toFirst(_ *tls.ConnectionState, h []hpack.HeaderField) Decision {
	return Decision{Header: h}
}

func client(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()

	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{}), grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

// Messages far larger than every window cross both ways intact, on many streams at once:
// flow control is passed through, not assumed.
func TestLargeMessagesAndConcurrentStreams(t *testing.T) {
	b := startBackend(t)
	_, addr := startRelay(t, toFirst, 256<<10, b.sock) // small windows: many updates
	c := client(t, addr)
	ctx := testenv.Context(t, time.Minute)

	var wg sync.WaitGroup

	errs := make(chan error, 40)

	for i := range 20 {
		wg.Add(2)

		go func() {
			defer wg.Done()

			req := bytes.Repeat([]byte{byte(i)}, 3<<20+i)

			var resp []byte
			if err := c.Invoke(ctx, "/t/Echo", &req, &resp); err != nil {
				errs <- err

				return
			}

			if !bytes.Equal(req, resp) {
				errs <- fmt.Errorf("echo %d: got %d bytes back, want %d", i, len(resp), len(req))
			}
		}()

		go func() {
			defer wg.Done()

			s, err := c.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/t/Upload")
			if err != nil {
				errs <- err

				return
			}

			chunk := make([]byte, 700<<10)

			for range 5 {
				if err = s.SendMsg(&chunk); err != nil {
					errs <- err

					return
				}
			}

			if err = s.CloseSend(); err != nil {
				errs <- err

				return
			}

			var resp []byte
			if err = s.RecvMsg(&resp); err != nil {
				errs <- err

				return
			}

			if string(resp) != fmt.Sprint(5*700<<10) {
				errs <- fmt.Errorf("upload: backend counted %s bytes", resp)
			}
		}()
	}

	wg.Wait()
	close(errs)

	for err := range errs {
		t.Error(err)
	}
}

// download opens /t/Download for n messages.
func download(t *testing.T, ctx context.Context, c *grpc.ClientConn, n byte) grpc.ClientStream {
	t.Helper()

	s, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/t/Download")
	if err != nil {
		t.Fatal(err)
	}

	req := []byte{n}
	if err = s.SendMsg(&req); err != nil {
		t.Fatal(err)
	}

	if err = s.CloseSend(); err != nil {
		t.Fatal(err)
	}

	return s
}

// A reader slower than the backend still gets every message in order.
func TestSlowReaderServerStream(t *testing.T) {
	b := startBackend(t)
	_, addr := startRelay(t, toFirst, 64<<10, b.sock)
	c := client(t, addr)
	ctx := testenv.Context(t, time.Minute)

	s := download(t, ctx, c, 12)

	var err error

	for i := 0; ; i++ {
		var m []byte

		err = s.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			if i != 12 {
				t.Fatalf("stream ended after %d messages, want 12", i)
			}

			return
		}

		if err != nil {
			t.Fatal(err)
		}

		if len(m) != 1<<20 || m[0] != byte(i) {
			t.Fatalf("message %d: %d bytes starting %d", i, len(m), m[0])
		}

		time.Sleep(20 * time.Millisecond)
	}
}

// A client's cancellation reaches the backend's handler.
func TestCancellationReachesBackend(t *testing.T) {
	b := startBackend(t)
	_, addr := startRelay(t, toFirst, 0, b.sock)
	c := client(t, addr)

	ctx, cancel := context.WithCancel(testenv.Context(t, time.Minute))

	s, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/t/Hang")
	if err != nil {
		t.Fatal(err)
	}

	req := []byte("x")
	if err = s.SendMsg(&req); err != nil {
		t.Fatal(err)
	}

	<-b.seenMD
	cancel()

	for deadline := time.Now().Add(10 * time.Second); b.canceled.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("backend handler was not canceled")
		}
	}
}

// A refusal from Route answers at once with its code and message (escaped on the wire), and
// the header rewrite reaches the backend.
func TestRouteDecisions(t *testing.T) {
	b := startBackend(t)

	route := func(_ *tls.ConnectionState, h []hpack.HeaderField) Decision {
		for _, f := range h {
			if f.Name == ":path" && f.Value == "/t/Hang" {
				return Decision{Code: int(codes.PermissionDenied), Message: "needs rôle os:admin 100%"}
			}
		}

		return Decision{Header: append(h, hpack.HeaderField{Name: "added", Value: "by-route"})}
	}

	_, addr := startRelay(t, route, 0, b.sock)
	c := client(t, addr)
	ctx := testenv.Context(t, time.Minute)

	req := []byte("x")

	var resp []byte

	err := c.Invoke(ctx, "/t/Hang", &req, &resp)
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "needs rôle os:admin 100%" {
		t.Fatalf("refusal: %v", err)
	}

	if err = c.Invoke(ctx, "/t/Echo", &req, &resp); err != nil {
		t.Fatal(err)
	}

	if md := <-b.seenMD; len(md.Get("added")) != 1 || md.Get("added")[0] != "by-route" {
		t.Fatalf("backend metadata %v lacks the added header", md)
	}

	// The connection is still good after a refusal.
	if err = c.Invoke(ctx, "/t/Echo", &req, &resp); err != nil {
		t.Fatal(err)
	}
}

// Streams go to the backend Route names; a backend that cannot be reached fails its calls
// with Unavailable; a backend that dies mid-call ends the call with Unavailable; the next call
// dials it again.
func TestBackendsAndFailures(t *testing.T) {
	b0, b1 := startBackend(t), startBackend(t)
	gone := filepath.Join(t.TempDir(), "none.sock")

	route := func(_ *tls.ConnectionState, h []hpack.HeaderField) Decision {
		for _, f := range h {
			if f.Name == "to" {
				var i int

				fmt.Sscan(f.Value, &i)

				return Decision{Backend: i, Header: h}
			}
		}

		return Decision{Backend: 7}
	}

	_, addr := startRelay(t, route, 0, b0.sock, b1.sock, gone)
	c := client(t, addr)
	ctx := testenv.Context(t, time.Minute)
	req := []byte("x")

	var resp []byte

	for i, b := range []*backend{b0, b1} {
		if err := c.Invoke(metadata.AppendToOutgoingContext(ctx, "to", fmt.Sprint(i)), "/t/Echo", &req, &resp); err != nil {
			t.Fatal(err)
		}

		if md := <-b.seenMD; md.Get("to")[0] != fmt.Sprint(i) {
			t.Fatalf("backend %d got a call routed to %v", i, md.Get("to"))
		}
	}

	if err := c.Invoke(metadata.AppendToOutgoingContext(ctx, "to", "2"), "/t/Echo", &req, &resp); status.Code(err) != codes.Unavailable {
		t.Fatalf("unreachable backend: %v", err)
	}

	if err := c.Invoke(ctx, "/t/Echo", &req, &resp); status.Code(err) != codes.Internal {
		t.Fatalf("no such backend: %v", err)
	}

	// Backend 1 dies while a call hangs on it.
	hctx := metadata.AppendToOutgoingContext(ctx, "to", "1")

	s, err := c.NewStream(hctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/t/Hang")
	if err != nil {
		t.Fatal(err)
	}

	if err = s.SendMsg(&req); err != nil {
		t.Fatal(err)
	}

	<-b1.seenMD
	b1.srv.Stop()

	if err = s.RecvMsg(&resp); status.Code(err) != codes.Unavailable {
		t.Fatalf("call on a dead backend: %v", err)
	}

	// Backend 0 is untouched, and a restarted backend 1 is dialed again.
	if err = c.Invoke(metadata.AppendToOutgoingContext(ctx, "to", "0"), "/t/Echo", &req, &resp); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("unix", b1.sock)
	if err != nil {
		t.Fatal(err)
	}

	again := grpc.NewServer(grpc.UnknownServiceHandler(b1.handle))

	go again.Serve(l)

	t.Cleanup(again.Stop)

	if err = c.Invoke(hctx, "/t/Echo", &req, &resp); err != nil {
		t.Fatalf("restarted backend: %v", err)
	}
}

// Stop lets a call in flight finish and closes the connection afterwards.
func TestStopDrains(t *testing.T) {
	b := startBackend(t)
	s, addr := startRelay(t, toFirst, 0, b.sock)
	c := client(t, addr)
	ctx := testenv.Context(t, time.Minute)

	st := download(t, ctx, c, 3)

	var err error

	var first []byte
	if err = st.RecvMsg(&first); err != nil {
		t.Fatal(err)
	}

	stopped := make(chan struct{})

	go func() {
		s.Stop(30 * time.Second)
		close(stopped)
	}()

	n := 1

	for {
		var m []byte

		if err = st.RecvMsg(&m); err != nil {
			break
		}

		n++
	}

	if !errors.Is(err, io.EOF) || n != 3 {
		t.Fatalf("drained call: %d messages, then %v", n, err)
	}

	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return once the call ended")
	}
}

// A client that sends past the window it was given is cut off: the relay never queues more
// than it advertised.
func TestClientOverrunningWindowIsClosed(t *testing.T) {
	// A backend that accepts and then neither reads nor writes: it takes at most its default
	// 64 KiB window, so that is all the relay can pass on and credit back.
	mute := filepath.Join(t.TempDir(), "mute.sock")

	ml, err := net.Listen("unix", mute)
	if err != nil {
		t.Fatal(err)
	}

	defer ml.Close()

	go func() {
		for {
			c, err := ml.Accept()
			if err != nil {
				return
			}

			t.Cleanup(func() { c.Close() })
		}
	}()

	_, addr := startRelay(t, toFirst, 0, mute) // 65535-byte windows

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	fw := http2.NewFramer(c, c)

	var hdr bytes.Buffer

	enc := hpack.NewEncoder(&hdr)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/t/Hang"}, {Name: ":authority", Value: "x"}, {Name: "content-type", Value: "application/grpc"}} {
		enc.WriteField(f)
	}

	done := make(chan error, 1)

	go func() { // the backend's hanging handler never reads; the relay must not either
		if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
			done <- err

			return
		}

		fw.WriteSettings()
		fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true})

		chunk := make([]byte, 16384)

		for range 16 { // 256 KiB into 64 KiB windows
			if err := fw.WriteData(1, false, chunk); err != nil {
				done <- err

				return
			}
		}

		done <- nil
	}()

	c.SetReadDeadline(time.Now().Add(20 * time.Second))

	for {
		f, err := fw.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}

		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeFlowControl {
				t.Fatalf("GOAWAY %v, want FLOW_CONTROL_ERROR", ga.ErrCode)
			}

			break
		}
	}

	<-done
}
