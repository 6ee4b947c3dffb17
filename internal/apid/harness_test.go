package apid

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/pki"
)

// testCA is an OS CA made for a test.
type testCA struct {
	crtPEM, keyPEM []byte
	cert           *x509.Certificate
	key            *ecdsa.PrivateKey
}

func newCA(t testing.TB) *testCA {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(mrand.Int64()),
		Subject:               pkix.Name{Organization: []string{"talos"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}

	cert, _ := x509.ParseCertificate(der)
	keyDER, _ := x509.MarshalECPrivateKey(key)

	return &testCA{
		crtPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		cert:   cert,
		key:    key,
	}
}

// client issues a client certificate with the given roles (Organization) and validity.
func (ca *testCA) client(t testing.TB, notBefore, notAfter time.Time, roles ...string) tls.Certificate {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(mrand.Int64()),
		Subject:      pkix.Name{CommonName: "test", Organization: roles},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) roleCert(t testing.TB, roles ...string) tls.Certificate {
	return ca.client(t, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), roles...)
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)

	return p
}

// fakeMachined is a real gRPC MachineService on a unix socket, standing in for machined in
// the package tests (the end-to-end test uses the real machined). It records the roles apid
// forwards.
type fakeMachined struct {
	machine.UnimplementedMachineServiceServer

	name string

	mu    sync.Mutex
	roles [][]string
}

func (f *fakeMachined) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)

	f.mu.Lock()
	f.roles = append(f.roles, md.Get(mdRole))
	f.mu.Unlock()
}

func (f *fakeMachined) lastRoles() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	if len(f.roles) == 0 {
		return nil
	}

	return f.roles[len(f.roles)-1]
}

func (f *fakeMachined) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	f.record(ctx)

	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: &common.Metadata{Hostname: f.name},
		Version:  &machine.VersionInfo{Tag: "v-test", Arch: f.name},
	}}}, nil
}

func (f *fakeMachined) Hostname(ctx context.Context, _ *emptypb.Empty) (*machine.HostnameResponse, error) {
	f.record(ctx)

	return &machine.HostnameResponse{Messages: []*machine.Hostname{{Hostname: f.name}}}, nil
}

func (f *fakeMachined) Reboot(ctx context.Context, _ *machine.RebootRequest) (*machine.RebootResponse, error) {
	f.record(ctx)

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: "reboot-" + f.name}}}, nil
}

func (f *fakeMachined) Reset(ctx context.Context, _ *machine.ResetRequest) (*machine.ResetResponse, error) {
	f.record(ctx)

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: "reset-" + f.name}}}, nil
}

func (f *fakeMachined) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv machine.MachineService_EtcdSnapshotServer) error {
	f.record(srv.Context())

	return srv.Send(&common.Data{Bytes: []byte("snapshot")})
}

func (f *fakeMachined) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machine.ServiceListResponse, error) {
	f.record(ctx)

	return nil, status.Error(codes.Unavailable, "service list broken on "+f.name)
}

// Logs streams n lines "<name> line i", tail_lines giving n.
func (f *fakeMachined) Logs(req *machine.LogsRequest, srv machine.MachineService_LogsServer) error {
	f.record(srv.Context())

	for i := range int(req.GetTailLines()) {
		if err := srv.Send(&common.Data{Bytes: fmt.Appendf(nil, "%s line %d", f.name, i)}); err != nil {
			return err
		}
	}

	return nil
}

// EtcdRecover (client stream) counts the bytes it receives.
func (f *fakeMachined) EtcdRecover(srv machine.MachineService_EtcdRecoverServer) error {
	f.record(srv.Context())

	total := 0

	for {
		d, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{
				Metadata: &common.Metadata{Hostname: fmt.Sprintf("%s:%d", f.name, total)},
			}}})
		}

		if err != nil {
			return err
		}

		total += len(d.GetBytes())
	}
}

// startFakeMachined serves f on a fresh socket until the test ends.
func startFakeMachined(t testing.TB, f *fakeMachined) string {
	t.Helper()

	dir, err := os.MkdirTemp("", "apid")
	if err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(dir, "m.sock")

	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}

	var opts []grpc.ServerOption
	if os.Getenv("APID_BENCH_STATIC_WINDOW") != "" {
		opts = append(opts, grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize))
	}

	srv := grpc.NewServer(opts...)
	machine.RegisterMachineServiceServer(srv, f)

	done := make(chan struct{})

	go func() {
		defer close(done)

		srv.Serve(l)
	}()

	t.Cleanup(func() {
		srv.Stop()
		<-done
		os.RemoveAll(dir)
	})

	return sock
}

// testNode is one node: fake machined + apid with certificates issued by pki.
type testNode struct {
	accepts  atomic.Int64 // TCP connections apid accepted
	addr     string
	certDir  string
	machined *fakeMachined
	server   *Server
	stop     func()
}

var subnet = struct {
	sync.Mutex
	next int
}{next: mrand.IntN(200)}

// listenNode listens on a free 127.88.X.Y:50000.
func listenNode(t testing.TB) net.Listener {
	t.Helper()

	for range 500 {
		subnet.Lock()
		subnet.next++
		n := subnet.next
		subnet.Unlock()

		addr := fmt.Sprintf("127.88.%d.%d:50000", (n/250)%250+1, n%250+1)

		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l
		}
	}

	t.Fatal("no free loopback address")

	return nil
}

func writeCerts(t testing.TB, ca *testCA, dir, addr string, accepted ...*testCA) {
	t.Helper()

	issuer := &pki.CA{Crt: ca.cert, CrtPEM: ca.crtPEM, Key: ca.key}
	name := "node-" + addr

	server, err := issuer.Issue(pki.Leaf{
		CommonName: name, IPs: []net.IP{net.ParseIP(addr)}, DNSNames: []string{name},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: 24 * time.Hour,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	client, err := issuer.Issue(pki.Leaf{
		CommonName: name, Organizations: []string{string(role.Impersonator)},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: 24 * time.Hour,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	bundle := [][]byte{ca.crtPEM}
	for _, a := range accepted {
		bundle = append(bundle, a.crtPEM)
	}

	if err = certs.WriteFiles(dir, map[string][]byte{
		certs.CA:        pki.Bundle(bundle...),
		certs.ServerCrt: server.Crt, certs.ServerKey: server.Key,
		certs.ClientCrt: client.Crt, certs.ClientKey: client.Key,
	}); err != nil {
		t.Fatal(err)
	}
}

func startNode(t testing.TB, ca *testCA) *testNode {
	t.Helper()

	l := listenNode(t)
	host, _, _ := net.SplitHostPort(l.Addr().String())

	n := &testNode{addr: host, certDir: t.TempDir(), machined: &fakeMachined{name: host}}
	sock := startFakeMachined(t, n.machined)

	writeCerts(t, ca, n.certDir, host)

	store, err := certs.NewStore(n.certDir)
	if err != nil {
		t.Fatal(err)
	}

	n.server, err = New(Options{Certs: store, MachinedSocket: sock, LocalAddresses: []string{host}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})

	go func() {
		defer close(done)

		n.server.Serve(&countingListener{Listener: l, n: &n.accepts})
	}()

	var once sync.Once

	n.stop = func() {
		once.Do(func() {
			n.server.Stop(time.Second)
			<-done
		})
	}

	t.Cleanup(n.stop)

	return n
}

// dial connects to a node's apid with a client certificate.
func dial(t testing.TB, ca *testCA, addr string, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()

	conn, err := grpc.NewClient(net.JoinHostPort(addr, "50000"), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      ca.pool(),
		Certificates: []tls.Certificate{cert},
	})))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	return conn
}

func withNodes(ctx context.Context, nodes ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "nodes", joinComma(nodes))
}

func joinComma(s []string) string {
	out := ""

	for i, v := range s {
		if i > 0 {
			out += ","
		}

		out += v
	}

	return out
}

func credsNoCert(ca *testCA) credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool()})
}

type countingListener struct {
	net.Listener

	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}

	return c, err
}
