// Package e2e runs apid end to end: real machined processes (each starting its own apid
// process) on loopback addresses, reached with the machinery client as talosctl does.
package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	tx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/testenv"
)

// cluster is one local cluster shared by the tests of this package.
type cluster struct {
	c     *provision.Cluster
	cfgs  *provision.Configs
	caCrt *x509.Certificate
	caKey any
	addrs []string
}

var (
	shared     *cluster
	sharedErr  error
	sharedOnce sync.Once
)

func getCluster(t testing.TB) *cluster {
	t.Helper()

	if testing.Short() {
		t.Skip("starts real machined processes")
	}

	sharedOnce.Do(func() {
		var destroy func()

		shared, destroy, sharedErr = createCluster(t, "apid", netip.MustParsePrefix(fmt.Sprintf("127.89.%d.0/24", mrand.IntN(250)+1)), 2)
		cleanup = destroy
	})

	if sharedErr != nil {
		t.Fatal(sharedErr)
	}

	return shared
}

// createCluster starts one control plane and the workers on cidr; destroy stops whatever got
// started, even when creation failed half-way.
func createCluster(t testing.TB, name string, cidr netip.Prefix, workers int) (cl *cluster, destroy func(), err error) {
	root, err := os.MkdirTemp("", "apid-e2e-")
	if err != nil {
		return nil, func() {}, err
	}

	destroy = func() {
		provision.Destroy(root, name, io.Discard)
		os.RemoveAll(root)
	}

	cl, err = startCluster(t, provision.Request{
		Name: name, ControlPlanes: 1, Workers: workers, CIDR: cidr, StateRoot: root, Binary: testenv.MachinedBinary(t),
	})

	return cl, destroy, err
}

func startCluster(t testing.TB, req provision.Request) (*cluster, error) {
	c, cfgs, err := provision.Create(context.Background(), req)
	if err != nil {
		return nil, fmt.Errorf("creating cluster: %w", err)
	}

	cfg, err := configloader.NewFromBytes(cfgs.ControlPlane)
	if err != nil {
		return nil, err
	}

	ca := cfg.Machine().Security().IssuingCA()

	caCrt, err := ca.GetCert()
	if err != nil {
		return nil, err
	}

	caKey, err := (&tx509.PEMEncodedCertificateAndKey{Crt: ca.Crt, Key: ca.Key}).GetKey()
	if err != nil {
		return nil, err
	}

	cl := &cluster{c: c, cfgs: cfgs, caCrt: caCrt, caKey: caKey}
	for _, n := range c.Nodes {
		cl.addrs = append(cl.addrs, n.Address)
	}

	// Wait until every node's apid answers through the control plane.
	cli, err := cl.client(t, cl.roleCert(t, "os:admin"))
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	deadline := time.Now().Add(90 * time.Second)

	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.MachineClient.Version(client.WithNodes(ctx, cl.addrs...), &emptypb.Empty{})

		cancel()

		if err == nil && len(resp.Messages) == len(cl.addrs) && allOK(resp.Messages) {
			return cl, nil
		}

		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range c.Nodes {
				fmt.Fprintf(&logs, "--- %s\n%s\n", n.Name, testenv.TailFile(n.State+"/../"+n.Name+".log", 3000))
			}

			return nil, fmt.Errorf("apid did not come up on every node: %v %w\n%s", resp, err, logs.String())
		}

		time.Sleep(500 * time.Millisecond)
	}
}

func allOK(msgs []*machine.Version) bool {
	for _, m := range msgs {
		if m.GetMetadata().GetError() != "" {
			return false
		}
	}

	return true
}

var cleanup = func() {}

func TestMain(m *testing.M) {
	code := m.Run()

	cleanup()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// cert issues a client certificate from the OS CA.
func (cl *cluster) cert(t testing.TB, ca *x509.Certificate, caKey any, notBefore, notAfter time.Time, roles ...string) tls.Certificate {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(mrand.Int64()),
		Subject:      pkix.Name{CommonName: "e2e", Organization: roles},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (cl *cluster) roleCert(t testing.TB, roles ...string) tls.Certificate {
	return cl.cert(t, cl.caCrt, cl.caKey, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), roles...)
}

func (cl *cluster) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(cl.caCrt)

	return p
}

// client connects to the control plane's apid as talosctl does (-e the control plane).
func (cl *cluster) client(t testing.TB, cert tls.Certificate) (*client.Client, error) {
	return client.New(context.Background(),
		client.WithEndpoints(cl.addrs[0]),
		client.WithTLSConfig(&tls.Config{RootCAs: cl.pool(), Certificates: []tls.Certificate{cert}}),
	)
}

func (cl *cluster) mustClient(t *testing.T, roles ...string) *client.Client {
	t.Helper()

	c, err := cl.client(t, cl.roleCert(t, roles...))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

func TestVersionFromEveryNode(t *testing.T) {
	cl := getCluster(t)
	c := cl.mustClient(t, "os:reader")

	resp, err := c.Version(client.WithNodes(testenv.Context(t, time.Minute), cl.addrs...))
	if err != nil {
		t.Fatal(err)
	}

	var hosts []string
	for _, m := range resp.Messages {
		hosts = append(hosts, m.GetMetadata().GetHostname())

		if m.GetVersion().GetTag() == "" {
			t.Errorf("no version from %s", m.GetMetadata().GetHostname())
		}
	}

	if !slices.Equal(hosts, cl.addrs) {
		t.Errorf("hostnames %v, want %v", hosts, cl.addrs)
	}

	// One-to-one to a worker: the reply is that worker's own (machined fills its hostname).
	one, err := c.Version(client.WithNode(testenv.Context(t, time.Minute), cl.addrs[2]))
	if err != nil || len(one.Messages) != 1 {
		t.Fatalf("one-to-one: %v %v", one, err)
	}

	h, err := c.MachineClient.Hostname(client.WithNode(testenv.Context(t, time.Minute), cl.addrs[2]), &emptypb.Empty{})
	if err != nil || h.Messages[0].GetHostname() != cl.c.Nodes[2].Name {
		t.Errorf("hostname of worker 2: %v %v", h, err)
	}
}

func TestLogsMergedFromTwoNodes(t *testing.T) {
	cl := getCluster(t)
	c := cl.mustClient(t, "os:reader")

	s, err := c.Logs(client.WithNodes(testenv.Context(t, time.Minute), cl.addrs[0], cl.addrs[1]), "system", common.ContainerDriver_CONTAINERD, "apid", false, 5)
	if err != nil {
		t.Fatal(err)
	}

	per := map[string]int{}

	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		if e := d.GetMetadata().GetError(); e != "" {
			t.Fatalf("node %s: %s", d.GetMetadata().GetHostname(), e)
		}

		per[d.GetMetadata().GetHostname()] += strings.Count(string(d.GetBytes()), "\n")
	}

	for _, a := range cl.addrs[:2] {
		if per[a] == 0 {
			t.Errorf("no apid log lines from %s: %v", a, per)
		}
	}
}

func TestRoleMatrixOnRealNodes(t *testing.T) {
	cl := getCluster(t)

	reader := cl.mustClient(t, "os:reader").MachineClient
	operator := cl.mustClient(t, "os:operator").MachineClient
	ctx := client.WithNode(testenv.Context(t, time.Minute), cl.addrs[1])

	if _, err := reader.Version(ctx, &emptypb.Empty{}); err != nil {
		t.Errorf("reader Version: %v", err)
	}

	_, err := reader.ServiceRestart(ctx, &machine.ServiceRestartRequest{Id: "nope"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "os:operator") {
		t.Errorf("reader ServiceRestart: want PermissionDenied naming os:operator, got %v", err)
	}

	// The operator passes authorization; machined answers for the unknown service.
	if _, err = operator.ServiceRestart(ctx, &machine.ServiceRestartRequest{Id: "nope"}); status.Code(err) == codes.PermissionDenied {
		t.Errorf("operator ServiceRestart denied: %v", err)
	}

	_, err = operator.Reset(ctx, &machine.ResetRequest{})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "os:admin") {
		t.Errorf("operator Reset: want PermissionDenied naming os:admin, got %v", err)
	}

	// A forged role assertion from a reader is refused.
	forged := metadata.AppendToOutgoingContext(ctx, "talos-role", "os:admin")
	if _, err = reader.Version(forged, &emptypb.Empty{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("forged role: %v", err)
	}
}

func TestSensitiveResourcesNeedAdmin(t *testing.T) {
	cl := getCluster(t)
	reader := cl.mustClient(t, "os:reader")
	admin := cl.mustClient(t, "os:admin")
	ctx := client.WithNode(testenv.Context(t, time.Minute), cl.addrs[1])

	if _, err := safe.StateGetByID[*network.HostnameStatus](ctx, reader.COSI, network.HostnameID); err != nil {
		t.Errorf("reader reading the hostname: %v", err)
	}

	_, err := safe.StateGetByID[*config.MachineConfig](ctx, reader.COSI, config.ActiveID)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "os:admin") {
		t.Errorf("reader reading the machine config: want PermissionDenied naming os:admin, got %v", err)
	}

	_, err = safe.StateListAll[*secrets.OSRoot](testenv.Context(t, time.Minute), reader.COSI)
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader listing secrets: %v", err)
	}

	if _, err = safe.StateGetByID[*config.MachineConfig](ctx, admin.COSI, config.ActiveID); err != nil {
		t.Errorf("admin reading the machine config: %v", err)
	}
}

func TestRejectedCertificatesOnRealNode(t *testing.T) {
	cl := getCluster(t)

	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	otherTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign,
	}

	otherDER, err := x509.CreateCertificate(rand.Reader, otherTmpl, otherTmpl, &otherKey.PublicKey, otherKey)
	if err != nil {
		t.Fatal(err)
	}

	other, _ := x509.ParseCertificate(otherDER)

	for name, cert := range map[string]tls.Certificate{
		"expired":  cl.cert(t, cl.caCrt, cl.caKey, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "os:admin"),
		"other CA": cl.cert(t, other, otherKey, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), "os:admin"),
	} {
		conn, err := grpc.NewClient(cl.addrs[0]+":50000", grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: cl.pool(), Certificates: []tls.Certificate{cert},
		})))
		if err != nil {
			t.Fatal(err)
		}

		_, err = machine.NewMachineServiceClient(conn).Version(testenv.Context(t, time.Minute), &emptypb.Empty{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: want refused handshake, got %v", name, err)
		}

		conn.Close()
	}
}

// talosctl runs talosctl with the cluster's talosconfig.
func (cl *cluster) talosctl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()

	talosctlPath := testenv.TalosctlBinary(t)

	cfgPath := filepath.Join(t.TempDir(), "talosconfig")
	if err = cl.cfgs.Talosconfig.Save(cfgPath); err != nil {
		t.Fatal(err)
	}

	var o, e strings.Builder

	cmd := exec.Command(talosctlPath, append([]string{"--talosconfig", cfgPath}, args...)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()

	return o.String(), e.String(), err
}

// TestTalosctlThroughAPID: -e picks the gateway, -n the nodes (comma-separated and repeated);
// the output is one table with a NODE column.
func TestTalosctlThroughAPID(t *testing.T) {
	cl := getCluster(t)

	for _, nodes := range [][]string{
		{"-n", strings.Join(cl.addrs, ",")},
		{"-n", cl.addrs[0], "-n", cl.addrs[1] + "," + cl.addrs[2]},
	} {
		out, errOut, err := cl.talosctl(t, append([]string{"-e", cl.addrs[0], "memory"}, nodes...)...)
		if err != nil {
			t.Fatalf("talosctl memory %v: %v\n%s", nodes, err, errOut)
		}

		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "NODE") {
			t.Fatalf("want a header and 3 rows:\n%s", out)
		}

		for i, a := range cl.addrs {
			if !strings.HasPrefix(lines[i+1], a+" ") {
				t.Errorf("row %d: %q, want node %s", i+1, lines[i+1], a)
			}
		}
	}
}

// A stopped worker's row is an error naming it; the others still answer. The test stops a
// node, so it runs on a cluster of its own, not the shared one.
func TestStoppedNodePartialReply(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real machined processes")
	}

	cl, destroy, err := createCluster(t, "apid-stopped", netip.MustParsePrefix(fmt.Sprintf("127.90.%d.0/24", mrand.IntN(250)+1)), 1)
	t.Cleanup(destroy)

	if err != nil {
		t.Fatal(err)
	}

	c := cl.mustClient(t, "os:reader")
	stopped := len(cl.addrs) - 1

	if err := cl.c.Nodes[stopped].Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	resp, err := c.MachineClient.Version(client.WithNodes(testenv.Context(t, time.Minute), cl.addrs...), &emptypb.Empty{})
	if err != nil {
		t.Fatalf("the call must succeed with one node stopped: %v", err)
	}

	if len(resp.Messages) != len(cl.addrs) {
		t.Fatalf("want %d messages: %v", len(cl.addrs), resp)
	}

	for i, m := range resp.Messages {
		failed := m.GetMetadata().GetError() != ""
		if m.GetMetadata().GetHostname() != cl.addrs[i] || failed != (i == stopped) {
			t.Errorf("message %d: %v", i, m.GetMetadata())
		}
	}

	// talosctl prints the good rows, the failed node on stderr, and exits non-zero.
	out, errOut, err := cl.talosctl(t, "-e", cl.addrs[0], "-n", strings.Join(cl.addrs, ","), "memory")
	if err == nil || !strings.Contains(errOut, cl.addrs[stopped]) || !strings.Contains(out, cl.addrs[0]+" ") || strings.Contains(out, cl.addrs[stopped]+" ") {
		t.Errorf("talosctl with a stopped node: err=%v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}

	// The machinery client (talosctl) turns the per-node error into an error naming the node,
	// and still returns the good replies.
	good, err := c.Version(client.WithNodes(testenv.Context(t, time.Minute), cl.addrs...))
	if err == nil || !strings.Contains(err.Error(), cl.addrs[stopped]) || good == nil || len(good.Messages) != len(cl.addrs)-1 {
		t.Errorf("filtered reply: %v %v", good, err)
	}
}
