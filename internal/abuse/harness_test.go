package abuse

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/apid"
	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/machined/system/logging"
	"github.com/talos-go/talos/internal/pki"
)

// The package's loopback block is 127.91.0.0/16; each test takes fresh addresses from it.
var lastAddr atomic.Int32

func loopback() string {
	n := lastAddr.Add(1)

	return fmt.Sprintf("127.91.%d.%d", n/250, n%250+1)
}

// ---- memory ----

// vmRSS is the process's resident memory, from /proc/self/status.
func vmRSS(t testing.TB) int64 {
	t.Helper()

	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}

	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}

			return kb << 10
		}
	}

	t.Fatal("no VmRSS in /proc/self/status")

	return 0
}

// rssWatch samples VmRSS while an attack runs, from a baseline taken after a collection.
type rssWatch struct {
	base, peak         atomic.Int64
	heapBase, heapPeak atomic.Int64 // Go heap objects, for telling the heap from the rest
	stop               chan struct{}
	done               chan struct{}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

func heapObjects() int64 {
	metrics.Read(heapSample)

	return int64(heapSample[0].Value.Uint64())
}

func watchRSS(t testing.TB) *rssWatch {
	t.Helper()

	runtime.GC()
	debug.FreeOSMemory()

	w := &rssWatch{stop: make(chan struct{}), done: make(chan struct{})}
	w.base.Store(vmRSS(t))
	w.peak.Store(w.base.Load())
	w.heapBase.Store(heapObjects())
	w.heapPeak.Store(w.heapBase.Load())

	go func() {
		defer close(w.done)

		for {
			if r := vmRSS(t); r > w.peak.Load() {
				w.peak.Store(r)
			}

			if h := heapObjects(); h > w.heapPeak.Load() {
				w.heapPeak.Store(h)
			}

			select {
			case <-w.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	return w
}

// growth stops the sampling, logs the peak growth, and fails the test past limit.
func (w *rssWatch) check(t testing.TB, limit int64) {
	t.Helper()

	close(w.stop)
	<-w.done

	growth := w.peak.Load() - w.base.Load()
	t.Logf("RSS: %d MiB before, peak %d MiB: grew %d MiB (limit %d MiB); Go heap objects: %d MiB before, peak %d MiB",
		w.base.Load()>>20, w.peak.Load()>>20, growth>>20, limit>>20, w.heapBase.Load()>>20, w.heapPeak.Load()>>20)

	if growth > limit {
		t.Errorf("RSS grew %d MiB under the attack, over the limit of %d MiB", growth>>20, limit>>20)
	}
}

// ---- certificates ----

type testCA struct {
	*pki.CA

	keyPEM []byte
	pool   *x509.CertPool
}

func newCA(t testing.TB) *testCA {
	t.Helper()

	ca, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true), cx509.Organization("talos"))
	if err != nil {
		t.Fatal(err)
	}

	parsed, err := pki.ParseCA(ca.CrtPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(parsed.Crt)

	return &testCA{CA: parsed, keyPEM: ca.KeyPEM, pool: pool}
}

func (ca *testCA) issue(t testing.TB, l pki.Leaf) *cx509.PEMEncodedCertificateAndKey {
	t.Helper()

	l.Lifetime = time.Hour

	pair, err := ca.Issue(l, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	return pair
}

// clientTLS is a client's TLS config with a certificate carrying roles (none: no certificate).
func (ca *testCA) clientTLS(t testing.TB, roles ...role.Role) *tls.Config {
	t.Helper()

	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool, NextProtos: []string{"h2"}}

	if len(roles) > 0 {
		var orgs []string
		for _, r := range roles {
			orgs = append(orgs, string(r))
		}

		pair := ca.issue(t, pki.Leaf{CommonName: "client", Organizations: orgs, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

		cert, err := tls.X509KeyPair(pair.Crt, pair.Key)
		if err != nil {
			t.Fatal(err)
		}

		cfg.Certificates = []tls.Certificate{cert}
	}

	return cfg
}

// ---- a machined stand-in ----

// machined is a MachineService on a unix socket: Version answers at once, Logs serves the logs
// in its folder through the real log reader (logging.Manager), as machined does.
type machined struct {
	machine.UnimplementedMachineServiceServer

	name     string
	logs     *logging.Manager
	logDir   string
	versions atomic.Int64 // Version calls answered
	streams  atomic.Int64 // calls begun (their headers seen), whatever became of them
}

func (m *machined) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	m.versions.Add(1)

	return &machine.VersionResponse{Messages: []*machine.Version{{Version: &machine.VersionInfo{Tag: "v-abuse", Arch: m.name}}}}, nil
}

func (m *machined) Logs(req *machine.LogsRequest, srv machine.MachineService_LogsServer) error {
	return m.logs.Read(srv.Context(), req.GetId(), int(req.GetTailLines()), req.GetFollow(), func(b []byte) error {
		return srv.Send(&common.Data{Bytes: b})
	})
}

// startMachined serves a machined stand-in until the test ends, with machined's message limit.
func startMachined(t testing.TB, name string) (*machined, string) {
	t.Helper()

	// Unix socket paths are short: not under t.TempDir, which can be deep.
	dir, err := os.MkdirTemp("", "abuse")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { os.RemoveAll(dir) })

	logs, err := logging.NewManager(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}

	m := &machined{name: name, logs: logs, logDir: filepath.Join(dir, "log")}
	sock := filepath.Join(dir, "m.sock")

	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}

	srv := grpc.NewServer(grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize), grpc.MaxSendMsgSize(constants.GRPCMaxMessageSize),
		grpc.InitialWindowSize(4<<20), grpc.InitialConnWindowSize(4<<20),
		grpc.InTapHandle(func(ctx context.Context, _ *tap.Info) (context.Context, error) {
			m.streams.Add(1)

			return ctx, nil
		}))
	machine.RegisterMachineServiceServer(srv, m)

	done := make(chan struct{})

	go func() {
		defer close(done)

		srv.Serve(l)
	}()

	t.Cleanup(func() {
		srv.Stop()
		<-done
		logs.Close()
	})

	return m, sock
}

// ---- apid nodes ----

type node struct {
	addr     string
	machined *machined
	server   *apid.Server
	stopOnce sync.Once
	served   chan struct{}
}

// stop stops the node's apid (Stop with timeout) and reports how long it took.
func (n *node) stop(timeout time.Duration) time.Duration {
	start := time.Now()

	n.stopOnce.Do(func() {
		n.server.Stop(timeout)
		<-n.served
	})

	return time.Since(start)
}

// startNode runs apid on a fresh loopback address, port 50000, before a machined stand-in,
// with a control plane's certificates (it forwards to other nodes).
func startNode(t testing.TB, ca *testCA) *node {
	t.Helper()

	addr := loopback()
	m, sock := startMachined(t, addr)

	server := ca.issue(t, pki.Leaf{CommonName: addr, IPs: []net.IP{net.ParseIP(addr)}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	client := ca.issue(t, pki.Leaf{CommonName: addr, Organizations: []string{string(role.Impersonator)}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	dir := t.TempDir()
	if err := certs.WriteFiles(dir, map[string][]byte{
		certs.CA: ca.CrtPEM, certs.ServerCrt: server.Crt, certs.ServerKey: server.Key, certs.ClientCrt: client.Crt, certs.ClientKey: client.Key,
	}); err != nil {
		t.Fatal(err)
	}

	store, err := certs.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}

	s, err := apid.New(apid.Options{Certs: store, MachinedSocket: sock, LocalAddresses: []string{addr}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", net.JoinHostPort(addr, "50000"))
	if err != nil {
		t.Fatal(err)
	}

	n := &node{addr: addr, machined: m, server: s, served: make(chan struct{})}

	go func() {
		defer close(n.served)

		s.Serve(l)
	}()

	t.Cleanup(func() {
		// A Stop that hangs (the failure some tests look for) must not hang the suite too.
		stopped := make(chan struct{})

		go func() {
			n.stop(time.Second)
			close(stopped)
		}()

		select {
		case <-stopped:
		case <-time.After(15 * time.Second):
			t.Errorf("apid on %s did not stop within 15s", addr)
		}
	})

	return n
}

// writeLog writes a service log of about size bytes, in lines of 100, for m to serve.
func writeLog(t testing.TB, m *machined, id string, size int) int {
	t.Helper()

	line := append(bytes.Repeat([]byte("l"), 99), '\n')
	data := bytes.Repeat(line, size/len(line))

	if err := os.WriteFile(filepath.Join(m.logDir, id+".log"), data, 0o600); err != nil {
		t.Fatal(err)
	}

	return len(data)
}

// dialNode is a gRPC client of a node's apid with roles (talosctl's message limit).
func dialNode(t testing.TB, ca *testCA, addr string, roles ...role.Role) *grpc.ClientConn {
	t.Helper()

	conn, err := grpc.NewClient(net.JoinHostPort(addr, "50000"),
		grpc.WithTransportCredentials(credentials.NewTLS(ca.clientTLS(t, roles...))),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(constants.GRPCMaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	return conn
}

// answeredWithin makes call once (with a deadline of bound, and a fresh connection for each
// attempt at the listener), fails the test when it takes longer or fails with a code that is
// not an answer (Unavailable, DeadlineExceeded), and returns how long it took.
func answeredWithin(t testing.TB, what string, bound time.Duration, call func(ctx context.Context) error) time.Duration {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	start := time.Now()
	err := call(ctx)
	took := time.Since(start)

	t.Logf("%s answered in %v (bound %v): %v", what, took.Round(time.Millisecond), bound, errOrOK(err))

	if err != nil || took > bound {
		t.Errorf("%s: not answered within %v: %v after %v", what, bound, err, took)
	}

	return took
}

func errOrOK(err error) string {
	if err == nil {
		return "OK"
	}

	return err.Error()
}

// dialFrom is a dialer whose connections come from the loopback address src.
func dialFrom(src string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}

		return d.DialContext(ctx, "tcp", addr)
	}
}

// isClosed reports whether the server ended c (EOF or reset) within wait.
func isClosed(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))

	buf := make([]byte, 512)

	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}

		var ne net.Error

		return !errors.As(err, &ne) || !ne.Timeout()
	}
}

// ---- a hostile HTTP/2 client ----

// rawClient speaks HTTP/2 frame by frame over TLS, as a hostile client with a valid
// certificate would: windows, resets and reads are its own choice.
type rawClient struct {
	c    net.Conn
	fw   *http2.Framer
	hdr  bytes.Buffer
	enc  *hpack.Encoder
	next uint32
	mu   sync.Mutex // writes
}

// dialRaw connects to addr (host:port) with tlsCfg, sends the preface and settings, and reads
// nothing.
func dialRaw(t testing.TB, addr string, tlsCfg *tls.Config, settings ...http2.Setting) *rawClient {
	t.Helper()

	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, tlsCfg)
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

// open starts a call of method (sending req, when not nil, and ending the request) and
// returns its stream id.
func (r *rawClient) open(method string, req proto.Message) (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	id := r.next
	r.next += 2

	r.hdr.Reset()

	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"}, {Name: ":path", Value: method},
		{Name: ":authority", Value: "abuse"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		r.enc.WriteField(f)
	}

	if err := r.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hdr.Bytes(), EndHeaders: true}); err != nil {
		return 0, err
	}

	if req != nil {
		msg, err := proto.Marshal(req)
		if err != nil {
			return 0, err
		}

		framed := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
		if err = r.fw.WriteData(id, true, append(framed, msg...)); err != nil {
			return 0, err
		}
	}

	return id, nil
}

func (r *rawClient) reset(id uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()

	return r.fw.WriteRSTStream(id, http2.ErrCodeCancel)
}

// goAway reads frames until a GOAWAY (returned) or the end of the connection or timeout (nil).
func (r *rawClient) goAway(timeout time.Duration) *http2.GoAwayFrame {
	r.c.SetReadDeadline(time.Now().Add(timeout))

	for {
		f, err := r.fw.ReadFrame()
		if err != nil {
			return nil
		}

		if ga, ok := f.(*http2.GoAwayFrame); ok {
			return ga
		}
	}
}
