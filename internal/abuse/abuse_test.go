package abuse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/apid"
	"github.com/talos-go/talos/internal/connlimit"
	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/trustd"
)

const (
	// answerBound is how long another client may wait for its answer while an attack runs: a
	// bound on a loaded 2-core machine, not a performance target.
	answerBound = 10 * time.Second

	logsMethod = "/machine.MachineService/Logs"
)

func version(conn *grpc.ClientConn) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := machine.NewMachineServiceClient(conn).Version(ctx, &emptypb.Empty{})

		return err
	}
}

// Two clients that stop reading: one at the TCP level (huge HTTP/2 windows, the socket never
// read: the relay's writes block) and one at the HTTP/2 level (windows of zero), each asking
// for big logs on many streams. Another client is answered; memory stays bounded by the
// relay's windows; apid's Stop returns at once with both still connected.
func TestZeroWindowReader(t *testing.T) {
	ca := newCA(t)
	n := startNode(t, ca)
	writeLog(t, n.machined, "big", 32<<20)

	admin := ca.clientTLS(t, role.Admin)
	addr := net.JoinHostPort(n.addr, "50000")
	w := watchRSS(t)

	tcpStuck := dialRaw(t, addr, admin, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	if err := tcpStuck.fw.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}

	h2Zero := dialRaw(t, addr, admin, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})

	for range 8 {
		if _, err := tcpStuck.open(logsMethod, &machine.LogsRequest{Id: "big", TailLines: -1}); err != nil {
			t.Fatal(err)
		}
	}

	for range 64 {
		if _, err := h2Zero.open(logsMethod, &machine.LogsRequest{Id: "big", TailLines: -1}); err != nil {
			t.Fatal(err)
		}
	}

	// machined starts the calls and the relay takes in all it will; then the other client. (The
	// setup's own wait is longer than answerBound: 72 streams of 32 MiB logs start slowly on a
	// loaded machine, and how fast they start is not what the test measures.)
	for deadline := time.Now().Add(3 * answerBound); n.machined.streams.Load() < 72; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("machined saw %d of the 72 calls", n.machined.streams.Load())
		}
	}

	time.Sleep(2 * time.Second)

	answeredWithin(t, "Version from another client", answerBound, version(dialNode(t, ca, n.addr, role.Reader)))
	w.check(t, 100<<20)

	stopped := make(chan time.Duration, 1)

	go func() { stopped <- n.stop(time.Second) }()

	select {
	case took := <-stopped:
		t.Logf("apid Stop(1s) returned in %v with both readers still connected", took.Round(time.Millisecond))
	case <-time.After(answerBound):
		t.Fatalf("apid Stop(1s) had not returned after %v with a stuck reader connected", answerBound)
	}
}

// A call naming 10,000 nodes is refused at once with InvalidArgument naming the cap, before any
// node is called; many such calls at once leave memory bounded and another client answered.
func TestHugeNodeList(t *testing.T) {
	ca := newCA(t)
	n := startNode(t, ca)
	conn := dialNode(t, ca, n.addr, role.Admin)

	nodes := make([]string, 10000)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}

	list := strings.Join(nodes, ",")
	capRE := regexp.MustCompile(`(\d+) nodes`)
	w := watchRSS(t)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
	)

	for range 16 {
		wg.Go(func() {
			took := answeredWithinCode(t, "Version to 10,000 nodes", codes.InvalidArgument, func(ctx context.Context) error {
				_, err := machine.NewMachineServiceClient(conn).Version(metadata.AppendToOutgoingContext(ctx, "nodes", list), &emptypb.Empty{})

				return err
			})

			mu.Lock()
			slowest = max(slowest, took)
			mu.Unlock()
		})
	}

	wg.Wait()
	t.Logf("16 calls at once naming 10,000 nodes each (%d KiB of metadata): refused within %v", len(list)>>10, slowest.Round(time.Millisecond))

	_, err := machine.NewMachineServiceClient(conn).Version(metadata.AppendToOutgoingContext(t.Context(), "nodes", list), &emptypb.Empty{})

	m := capRE.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		t.Fatalf("the refusal does not name the cap: %v", err)
	}

	if limit, _ := strconv.Atoi(m[1]); limit >= len(nodes) || limit < 1 {
		t.Fatalf("the refusal names a cap of %d nodes", limit)
	}

	t.Logf("refusal: %v", err)

	if got := n.machined.versions.Load(); got != 0 {
		t.Errorf("machined answered %d Version calls of refused fan-outs", got)
	}

	answeredWithin(t, "Version from another client", answerBound, version(dialNode(t, ca, n.addr, role.Reader)))
	w.check(t, 100<<20)
}

// answeredWithinCode makes call and fails unless it ends with want within answerBound; it
// returns how long it took.
func answeredWithinCode(t testing.TB, what string, want codes.Code, call func(context.Context) error) time.Duration {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), answerBound)
	defer cancel()

	start := time.Now()
	err := call(ctx)
	took := time.Since(start)

	if status.Code(err) != want || took > answerBound {
		t.Errorf("%s: %v after %v, want %v within %v", what, err, took, want, answerBound)
	}

	return took
}

// A client opening streams only to reset them is cut off with GOAWAY ENHANCE_YOUR_CALM; machined
// saw a bounded share of the flood, another client is answered, memory stays bounded.
func TestRapidResetFlood(t *testing.T) {
	ca := newCA(t)
	n := startNode(t, ca)
	r := dialRaw(t, net.JoinHostPort(n.addr, "50000"), ca.clientTLS(t, role.Admin))
	w := watchRSS(t)

	const flood = 20000

	sent := make(chan int, 1)
	start := time.Now()

	go func() {
		i := 0

		defer func() { sent <- i }()

		for ; i < flood; i++ {
			id, err := r.open("/machine.MachineService/Version", nil)
			if err != nil || r.reset(id) != nil {
				return // cut off
			}
		}
	}()

	ga := r.goAway(30 * time.Second)
	cut := time.Since(start)

	if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("a flood of %d reset streams got GOAWAY %v within 30s, want ENHANCE_YOUR_CALM", flood, ga)
	}

	r.c.Close()

	streams := n.machined.streams.Load()
	t.Logf("flood cut off after %v (%d streams sent, GOAWAY %q); machined saw %d calls begin", cut.Round(time.Millisecond), <-sent, ga.DebugData(), streams)

	if streams > flood/4 {
		t.Errorf("machined saw %d calls of a flood of %d: the flood was not cut off early", streams, flood)
	}

	answeredWithin(t, "Version from another client", answerBound, version(dialNode(t, ca, n.addr, role.Reader)))
	w.check(t, 100<<20)
}

// A 100 MiB service log, tailed whole through another node (node A's router and pool to node
// B's apid and machined), arrives complete in chunks; another client is answered during the
// tail; memory grows by a fraction of the log.
func TestHugeLogTailThroughAnotherNode(t *testing.T) {
	ca := newCA(t)
	a, b := startNode(t, ca), startNode(t, ca)
	size := writeLog(t, b.machined, "huge", 100<<20)
	conn := dialNode(t, ca, a.addr, role.Admin)
	other := dialNode(t, ca, a.addr, role.Reader)
	w := watchRSS(t)

	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "nodes", b.addr), 2*time.Minute)
	defer cancel()

	start := time.Now()

	s, err := machine.NewMachineServiceClient(conn).Logs(ctx, &machine.LogsRequest{Id: "huge", TailLines: -1})
	if err != nil {
		t.Fatal(err)
	}

	total, msgs, largest := 0, 0, 0
	asked := false

	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatalf("after %d bytes: %v", total, err)
		}

		if d.GetMetadata().GetError() != "" {
			t.Fatalf("node error after %d bytes: %s", total, d.GetMetadata().GetError())
		}

		if d.GetMetadata().GetHostname() != b.addr {
			t.Fatalf("message stamped %q, want node %s", d.GetMetadata().GetHostname(), b.addr)
		}

		total += len(d.GetBytes())
		msgs++
		largest = max(largest, len(d.GetBytes()))

		if !asked && total > size/2 {
			asked = true

			answeredWithin(t, "Version from another client halfway through the tail", answerBound, version(other))
		}
	}

	t.Logf("tailed %d MiB through %s to %s in %v: %d messages, the largest %d KiB", total>>20, a.addr, b.addr, time.Since(start).Round(time.Millisecond), msgs, largest>>10)

	if total != size {
		t.Fatalf("tail brought %d bytes of %d", total, size)
	}

	w.check(t, 150<<20)
}

// slowClients attacks an unauthenticated listener at addr from one source address: more TCP
// connections than the per-source cap that never begin their TLS handshake, and one connection
// that opens far more streams than it may and sends nothing on them. The connections past the
// cap are closed at once, the rest after the handshake timeout; streams past the limit are
// refused; call (from another source address) is answered meanwhile; memory stays bounded.
func slowClients(t *testing.T, addr, method string, call func(ctx context.Context, src string) error) {
	t.Helper()

	attacker := loopback()
	w := watchRSS(t)
	start := time.Now()

	const conns = connlimit.MaxPerSource + 8

	closedAfter := make(chan time.Duration, conns)

	for range conns {
		c, err := dialFrom(attacker)(t.Context(), addr)
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { c.Close() })

		go func() {
			if isClosed(c, connlimit.HandshakeTimeout+10*time.Second) {
				closedAfter <- time.Since(start)
			} else {
				closedAfter <- -1
			}
		}()
	}

	// A client from elsewhere, while the attacker holds all it may.
	time.Sleep(500 * time.Millisecond)
	answeredWithin(t, "a call from another source address", answerBound, func(ctx context.Context) error { return call(ctx, loopback()) })

	// Streams: one TLS connection (no client certificate), 100 calls begun and never sent.
	streamer := dialRaw(t, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})

	for range 100 {
		if _, err := streamer.open(method, nil); err != nil {
			t.Fatal(err)
		}
	}

	refused := 0

	streamer.c.SetReadDeadline(time.Now().Add(5 * time.Second))

	for refused < 100-connlimit.MaxStreams {
		f, err := streamer.fw.ReadFrame()
		if err != nil {
			break
		}

		if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.ErrCode == http2.ErrCodeRefusedStream {
			refused++
		}
	}

	t.Logf("100 streams on one connection: %d refused (limit %d per connection)", refused, connlimit.MaxStreams)

	if refused < 100-connlimit.MaxStreams {
		t.Errorf("%d of 100 streams refused on one connection, want %d", refused, 100-connlimit.MaxStreams)
	}

	var atOnce, atTimeout, open int

	for range conns {
		switch d := <-closedAfter; {
		case d < 0:
			open++
		case d < 2*time.Second:
			atOnce++
		default:
			atTimeout++
		}
	}

	t.Logf("%d silent connections from %s: %d closed at once (past the cap of %d), %d by the handshake timeout (%v), %d still open after %v",
		conns, attacker, atOnce, connlimit.MaxPerSource, atTimeout, connlimit.HandshakeTimeout, open, connlimit.HandshakeTimeout+10*time.Second)

	if atOnce != conns-connlimit.MaxPerSource || atTimeout != connlimit.MaxPerSource {
		t.Errorf("of %d silent connections from one address %d were closed at once and %d by the handshake timeout; want %d and %d",
			conns, atOnce, atTimeout, conns-connlimit.MaxPerSource, connlimit.MaxPerSource)
	}

	w.check(t, 50<<20)
}

// Slow clients on the maintenance API (anyone may connect to it).
func TestSlowClientsMaintenance(t *testing.T) {
	_, sock := startMachined(t, "maintenance")
	addr := net.JoinHostPort(loopback(), "50000")

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)

	go func() {
		served <- apid.ServeMaintenance(ctx, apid.MaintenanceOptions{Listen: addr, MachinedSocket: sock, Log: zap.NewNop()})
	}()

	t.Cleanup(func() {
		cancel()
		<-served
	})

	call := func(ctx context.Context, src string) error {
		conn, err := grpc.NewClient(addr, grpc.WithContextDialer(dialFrom(src)),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
		if err != nil {
			return err
		}
		defer conn.Close()

		_, err = machine.NewMachineServiceClient(conn).Version(ctx, &emptypb.Empty{}, grpc.WaitForReady(true))

		return err
	}

	// The API is up before the attack.
	if err := call(t.Context(), loopback()); err != nil {
		t.Fatal(err)
	}

	slowClients(t, addr, "/machine.MachineService/Version", call)
}

// Slow clients on trustd (anyone may connect to it; calls need the cluster token).
func TestSlowClientsTrustd(t *testing.T) {
	ca := newCA(t)
	host := loopback()

	srvPair := ca.issue(t, pki.Leaf{CommonName: "trustd", IPs: []net.IP{net.ParseIP(host)}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	dir := t.TempDir()

	const token = "abcdef.0123456789abcdef"

	if err := trustd.WriteFiles(dir, map[string][]byte{
		trustd.CACrt: ca.CrtPEM, trustd.CAKey: ca.keyPEM, trustd.TokenFile: []byte(token), trustd.ServerCrt: srvPair.Crt, trustd.ServerKey: srvPair.Key,
	}); err != nil {
		t.Fatal(err)
	}

	store, err := trustd.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}

	l, err := trustd.Listen(net.JoinHostPort(host, strconv.Itoa(trustd.Port)))
	if err != nil {
		t.Fatal(err)
	}

	srv := trustd.NewGRPCServer(&trustd.Server{Certs: store, Log: zap.NewNop()})
	done := make(chan struct{})

	go func() {
		defer close(done)

		srv.Serve(l)
	}()

	t.Cleanup(func() {
		srv.Stop()
		<-done
	})

	addr := l.Addr().String()

	call := func(ctx context.Context, src string) error {
		csr, _, err := pki.NewCSR(pki.Leaf{CommonName: src, IPs: []net.IP{net.ParseIP(src)}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			return err
		}

		conn, err := grpc.NewClient(addr, grpc.WithContextDialer(dialFrom(src)),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool})))
		if err != nil {
			return err
		}
		defer conn.Close()

		ctx = metadata.AppendToOutgoingContext(ctx, trustd.TokenMetadataKey, token)
		resp, err := securityapi.NewSecurityServiceClient(conn).Certificate(ctx, &securityapi.CertificateRequest{Csr: csr}, grpc.WaitForReady(true))

		if err == nil && len(resp.GetCrt()) == 0 {
			err = errors.New("no certificate in the answer")
		}

		return err
	}

	if err := call(t.Context(), loopback()); err != nil {
		t.Fatal(err)
	}

	slowClients(t, addr, securityapi.SecurityService_Certificate_FullMethodName, call)
}
