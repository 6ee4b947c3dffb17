package talosctl

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeAPID is a MachineService over mTLS that answers Version like a fanning-out apid: one
// message per node in the "nodes" metadata, with metadata.error for nodes named "bad*".
// It stands in for apid until the real one exists (see the integration hook below).
type fakeAPID struct {
	machineapi.UnimplementedMachineServiceServer

	mu    sync.Mutex
	nodes [][]string
}

func (f *fakeAPID) Version(ctx context.Context, _ *emptypb.Empty) (*machineapi.VersionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	nodes := md.Get("nodes")

	f.mu.Lock()
	f.nodes = append(f.nodes, nodes)
	f.mu.Unlock()

	resp := &machineapi.VersionResponse{}

	for _, n := range nodes {
		m := &machineapi.Version{Metadata: &common.Metadata{Hostname: n}}

		if strings.HasPrefix(n, "bad") {
			m.Metadata.Error = "node unreachable"
		} else {
			m.Version = &machineapi.VersionInfo{Tag: "v1.11.0-test", Os: "linux", Arch: "amd64"}
		}

		resp.Messages = append(resp.Messages, m)
	}

	return resp, nil
}

func (f *fakeAPID) lastNodes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	if len(f.nodes) == 0 {
		return nil
	}

	return f.nodes[len(f.nodes)-1]
}

// startFakeAPID serves fakeAPID with a server cert from the bundle's OS CA, requiring client
// certs from the same CA, and returns a talosconfig path with the given endpoint list
// ("live" is replaced by the server address, "dead" by a closed port).
func startFakeAPID(t *testing.T, endpoints ...string) (*fakeAPID, string, string) {
	t.Helper()

	bundle, err := secrets.NewBundle(secrets.NewClock(), nil)
	if err != nil {
		t.Fatal(err)
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(bundle.Certs.OS)
	if err != nil {
		t.Fatal(err)
	}

	serverCert, err := x509.NewKeyPair(ca,
		x509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1")}),
		x509.CommonName("apid"),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}))
	if err != nil {
		t.Fatal(err)
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(bundle.Certs.OS.Crt)

	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*serverCert.Certificate},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})))

	fake := &fakeAPID{}
	machineapi.RegisterMachineServiceServer(srv, fake)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	go srv.Serve(lis)

	t.Cleanup(srv.Stop)

	deadLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	dead := deadLis.Addr().String()
	deadLis.Close()

	live := lis.Addr().String()

	for i, e := range endpoints {
		endpoints[i] = strings.NewReplacer("live", live, "dead", dead).Replace(e)
	}

	clientCert, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "talosconfig")
	if err = clientconfig.NewConfig("test", endpoints, bundle.Certs.OS.Crt, clientCert).Save(path); err != nil {
		t.Fatal(err)
	}

	return fake, path, live
}

func TestConnectFailsOverToALiveEndpoint(t *testing.T) {
	isolate(t)

	fake, cfg, _ := startFakeAPID(t, "dead", "live")

	// the resolver shuffles endpoints: repeat so the dead one is tried first at least once.
	for range 4 {
		code, out, stderr := run(t, "--talosconfig", cfg, "-n", "10.0.0.1,10.0.0.2", "version")
		if code != 0 {
			t.Fatalf("version failed: %s", stderr)
		}

		mustContain(t, out, "Client:", "Server:", "NODE:        10.0.0.1", "NODE:        10.0.0.2", "Tag:         v1.11.0-test")

		if got := fake.lastNodes(); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
			t.Errorf("nodes metadata: %v", got)
		}
	}
}

func TestConnectDefaultNodeIsFirstEndpoint(t *testing.T) {
	isolate(t)

	fake, cfg, live := startFakeAPID(t, "live", "dead")

	if code, _, stderr := run(t, "--talosconfig", cfg, "version"); code != 0 {
		t.Fatal(stderr)
	}

	if got := fake.lastNodes(); !slices.Equal(got, []string{live}) {
		t.Errorf("default node: got %v, want the first endpoint %s", got, live)
	}

	// -e overrides the context's endpoints, and the default node follows it.
	if code, _, stderr := run(t, "--talosconfig", cfg, "-e", "127.0.0.1:1,"+live, "version"); code != 0 {
		t.Fatal(stderr)
	}

	if got := fake.lastNodes(); !slices.Equal(got, []string{"127.0.0.1:1"}) {
		t.Errorf("default node with -e: %v", got)
	}

	// nodes of the context come before the default.
	if code, _, stderr := run(t, "--talosconfig", cfg, "config", "node", "10.9.9.9"); code != 0 {
		t.Fatal(stderr)
	}

	if code, _, stderr := run(t, "--talosconfig", cfg, "version"); code != 0 {
		t.Fatal(stderr)
	}

	if got := fake.lastNodes(); !slices.Equal(got, []string{"10.9.9.9"}) {
		t.Errorf("context nodes: %v", got)
	}
}

func TestConnectPerNodeErrorsFailTheCommand(t *testing.T) {
	isolate(t)

	_, cfg, _ := startFakeAPID(t, "live")

	code, out, stderr := run(t, "--talosconfig", cfg, "-n", "10.0.0.1", "-n", "bad-node", "version")
	if code == 0 {
		t.Fatal("a failed node must make the exit code non-zero")
	}

	mustContain(t, out, "NODE:        10.0.0.1")
	mustContain(t, stderr, "bad-node", "node unreachable")

	if strings.Contains(out, "bad-node") {
		t.Errorf("failed node rendered on stdout: %s", out)
	}

	// every node failing still reports each of them.
	code, _, stderr = run(t, "--talosconfig", cfg, "-n", "bad1,bad2", "version")
	if code == 0 {
		t.Fatal("all nodes failed but exit code is 0")
	}

	mustContain(t, stderr, "bad1", "bad2")
}

func TestConnectErrorsSayWhatToDo(t *testing.T) {
	isolate(t)

	_, cfg, _ := startFakeAPID(t, "dead")

	code, _, stderr := run(t, "--talosconfig", cfg, "memory")
	if code == 0 {
		t.Fatal("memory against a dead endpoint succeeded")
	}

	mustContain(t, stderr, "talosctl config info")

	_, cfg2, _ := startFakeAPID(t, "live")

	code, _, stderr = run(t, "--talosconfig", cfg2, "memory")
	if code == 0 {
		t.Fatal("an unimplemented call succeeded")
	}

	mustContain(t, stderr, "does not serve this API")
}
