package apid

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the apid process for TestProcess.
	if os.Getenv("APID_TEST_PROCESS") == "1" {
		if err := Main(os.Args[1:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}

		os.Exit(0)
	}

	code := m.Run()
	if code == 0 {
		// Every goroutine the proxy starts has an owner that ends it.
		// goleak retries for under half a second; closing connections can take longer here.
		err := goleak.Find()
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			err = goleak.Find()
		}

		if err != nil {
			os.Stderr.WriteString("goroutine leak: " + err.Error() + "\n")

			code = 1
		}
	}

	os.Exit(code)
}

func TestAuthzTableCoversEveryMethod(t *testing.T) {
	for _, svc := range []string{
		"machine.MachineService", "cluster.ClusterService", "inspect.InspectService",
		"storage.StorageService", "time.TimeService", "securityapi.SecurityService", "cosi.resource.State",
	} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}

		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			name := "/" + svc + "/" + string(methods.Get(i).Name())
			if _, ok := LeastRole(name); !ok {
				t.Errorf("%s has no rule", name)
			}
		}
	}

	for _, m := range Methods() {
		if !lookupMethod(m).known {
			t.Errorf("rule for %s names no registered method", m)
		}
	}

	if err := Authorize("/machine.MachineService/Nope", role.MakeSet(role.Admin)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("unknown method: %v", err)
	}
}

func TestRoleMatrix(t *testing.T) {
	ca := newCA(t)
	n := startNode(t, ca)

	calls := map[string]func(context.Context, machine.MachineServiceClient) error{
		"Version": func(ctx context.Context, c machine.MachineServiceClient) error {
			_, err := c.Version(ctx, &emptypb.Empty{})
			return err
		},
		"Reboot": func(ctx context.Context, c machine.MachineServiceClient) error {
			_, err := c.Reboot(ctx, &machine.RebootRequest{})
			return err
		},
		"Reset": func(ctx context.Context, c machine.MachineServiceClient) error {
			_, err := c.Reset(ctx, &machine.ResetRequest{})
			return err
		},
		"EtcdSnapshot": func(ctx context.Context, c machine.MachineServiceClient) error {
			s, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
			if err != nil {
				return err
			}

			_, err = s.Recv()

			return err
		},
	}
	need := map[string]string{"Version": "os:reader", "Reboot": "os:operator", "Reset": "os:admin", "EtcdSnapshot": "os:etcd:backup"}

	for _, tc := range []struct {
		roles   []string
		allowed []string
	}{
		{[]string{"os:admin"}, []string{"Version", "Reboot", "Reset", "EtcdSnapshot"}},
		{[]string{"os:operator"}, []string{"Version", "Reboot", "EtcdSnapshot"}},
		{[]string{"os:reader"}, []string{"Version"}},
		{[]string{"os:etcd:backup"}, []string{"EtcdSnapshot"}},
		{[]string{"os:impersonator"}, nil},
		{nil, nil},
		{[]string{"os:reader", "os:etcd:backup"}, []string{"Version", "EtcdSnapshot"}},
	} {
		c := machine.NewMachineServiceClient(dial(t, ca, n.addr, ca.roleCert(t, tc.roles...)))

		for name, call := range calls {
			err := call(t.Context(), c)
			if slices.Contains(tc.allowed, name) {
				if err != nil {
					t.Errorf("%v %s: want allowed, got %v", tc.roles, name, err)
				}

				if got := n.machined.lastRoles(); !slices.Equal(got, slices.Sorted(slices.Values(tc.roles))) {
					t.Errorf("%v %s: machined saw roles %v", tc.roles, name, got)
				}

				continue
			}

			if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), need[name]) {
				t.Errorf("%v %s: want PermissionDenied naming %s, got %v", tc.roles, name, need[name], err)
			}
		}
	}
}

func TestFanOutPartialReply(t *testing.T) {
	ca := newCA(t)
	nodes := []*testNode{startNode(t, ca), startNode(t, ca), startNode(t, ca)}
	nodes[2].stop()

	c := machine.NewMachineServiceClient(dial(t, ca, nodes[0].addr, ca.roleCert(t, "os:reader")))
	all := []string{nodes[0].addr, nodes[1].addr, nodes[2].addr}

	resp, err := c.Version(withNodes(t.Context(), all...), &emptypb.Empty{})
	if err != nil {
		t.Fatalf("fan-out with a stopped node must succeed: %v", err)
	}

	if len(resp.Messages) != 3 {
		t.Fatalf("want 3 messages, got %d: %v", len(resp.Messages), resp)
	}

	for i, m := range resp.Messages {
		if m.GetMetadata().GetHostname() != all[i] {
			t.Errorf("message %d: hostname %q, want %q", i, m.GetMetadata().GetHostname(), all[i])
		}

		if i < 2 {
			if m.GetMetadata().GetError() != "" || m.GetVersion().GetArch() != all[i] {
				t.Errorf("message %d: %v", i, m)
			}
		} else if m.GetMetadata().GetError() == "" || m.GetMetadata().GetStatus().GetCode() != int32(codes.Unavailable) {
			t.Errorf("stopped node: want an Unavailable error in metadata, got %v", m.GetMetadata())
		}
	}

	// A node-side failure is reported per node too.
	sl, err := c.ServiceList(withNodes(t.Context(), all[:2]...), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	if len(sl.Messages) != 2 || !strings.Contains(sl.Messages[1].GetMetadata().GetError(), "broken on "+all[1]) {
		t.Errorf("per-node errors: %v", sl)
	}
}

func TestLogsMergedFromTwoNodes(t *testing.T) {
	ca := newCA(t)
	a, b := startNode(t, ca), startNode(t, ca)

	c := machine.NewMachineServiceClient(dial(t, ca, a.addr, ca.roleCert(t, "os:reader")))

	s, err := c.Logs(withNodes(t.Context(), a.addr, b.addr), &machine.LogsRequest{Id: "x", TailLines: 50})
	if err != nil {
		t.Fatal(err)
	}

	lines := map[string][]string{}

	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		host := d.GetMetadata().GetHostname()
		if !strings.HasPrefix(string(d.GetBytes()), host+" line ") {
			t.Fatalf("line %q stamped with %q", d.GetBytes(), host)
		}

		lines[host] = append(lines[host], string(d.GetBytes()))
	}

	for _, n := range []*testNode{a, b} {
		if len(lines[n.addr]) != 50 || lines[n.addr][49] != n.addr+" line 49" {
			t.Errorf("%s: got %d lines, in order: %v", n.addr, len(lines[n.addr]), lines[n.addr][len(lines[n.addr])-1:])
		}
	}
}

func TestLogsStreamWithStoppedNode(t *testing.T) {
	ca := newCA(t)
	a, b := startNode(t, ca), startNode(t, ca)
	b.stop()

	c := machine.NewMachineServiceClient(dial(t, ca, a.addr, ca.roleCert(t, "os:reader")))

	s, err := c.Logs(withNodes(t.Context(), a.addr, b.addr), &machine.LogsRequest{Id: "x", TailLines: 3})
	if err != nil {
		t.Fatal(err)
	}

	var ok, failed int

	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		if d.GetMetadata().GetError() != "" {
			if d.GetMetadata().GetHostname() != b.addr {
				t.Errorf("error from %s", d.GetMetadata().GetHostname())
			}

			failed++
		} else {
			ok++
		}
	}

	if ok != 3 || failed != 1 {
		t.Errorf("got %d lines and %d errors, want 3 and 1", ok, failed)
	}
}

func TestOneToOne(t *testing.T) {
	ca := newCA(t)
	a, b := startNode(t, ca), startNode(t, ca)

	c := machine.NewMachineServiceClient(dial(t, ca, a.addr, ca.roleCert(t, "os:admin")))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "node", b.addr)

	v, err := c.Version(ctx, &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	if v.Messages[0].GetMetadata().GetHostname() != b.addr || v.Messages[0].GetVersion().GetArch() != b.addr {
		t.Errorf("reply not from %s: %v", b.addr, v)
	}

	// Calls to the same node share one pooled connection.
	for range 20 {
		if _, err = c.Version(ctx, &emptypb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}

	if _, err = c.Version(withNodes(t.Context(), a.addr, b.addr), &emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}

	if got := b.accepts.Load(); got != 1 {
		t.Errorf("node-to-node connections to %s: %d, want 1 (pooled)", b.addr, got)
	}

	// The remote node authorizes the forwarded role: its machined sees the caller's role.
	if got := b.machined.lastRoles(); !slices.Equal(got, []string{"os:admin"}) {
		t.Errorf("remote machined saw roles %v", got)
	}

	// Server stream one-to-one.
	s, err := c.Logs(ctx, &machine.LogsRequest{TailLines: 4})
	if err != nil {
		t.Fatal(err)
	}

	var got []string

	for {
		d, err := s.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}

			break
		}

		got = append(got, string(d.GetBytes()))
	}

	if len(got) != 4 || got[0] != b.addr+" line 0" {
		t.Errorf("logs via node: %v", got)
	}

	// Client stream one-to-one.
	rs, err := c.EtcdRecover(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for range 10 {
		if err = rs.Send(&common.Data{Bytes: make([]byte, 1000)}); err != nil {
			t.Fatal(err)
		}
	}

	rr, err := rs.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}

	if h := rr.Messages[0].GetMetadata().GetHostname(); h != b.addr+":10000" {
		t.Errorf("client stream reached %q", h)
	}

	// Client streams do not fan out.
	rs, err = c.EtcdRecover(withNodes(t.Context(), a.addr, b.addr))
	if err == nil {
		_, err = rs.CloseAndRecv()
	}

	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("client stream to 2 nodes: %v", err)
	}
}

func TestForgedRoles(t *testing.T) {
	ca := newCA(t)
	a, b := startNode(t, ca), startNode(t, ca)

	// The node's own certificate holds os:impersonator only.
	nodeCert, err := tls.LoadX509KeyPair(a.certDir+"/client.crt", a.certDir+"/client.key")
	if err != nil {
		t.Fatal(err)
	}

	leaf, _ := x509.ParseCertificate(nodeCert.Certificate[0])
	if !slices.Equal(leaf.Subject.Organization, []string{"os:impersonator"}) {
		t.Fatalf("node certificate organization %v", leaf.Subject.Organization)
	}

	reader := machine.NewMachineServiceClient(dial(t, ca, a.addr, ca.roleCert(t, "os:reader")))
	imp := machine.NewMachineServiceClient(dial(t, ca, b.addr, nodeCert))

	asserting := func(r string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "talos-role", r)
	}

	version := func(c machine.MachineServiceClient, ctx context.Context) error {
		_, err := c.Version(ctx, &emptypb.Empty{})
		return err
	}
	reboot := func(c machine.MachineServiceClient, ctx context.Context) error {
		_, err := c.Reboot(ctx, &machine.RebootRequest{})
		return err
	}
	reset := func(c machine.MachineServiceClient, ctx context.Context) error {
		_, err := c.Reset(ctx, &machine.ResetRequest{})
		return err
	}

	for _, tc := range []struct {
		name   string
		client machine.MachineServiceClient
		ctx    context.Context
		call   func(machine.MachineServiceClient, context.Context) error
		code   codes.Code
		seenBy *fakeMachined // on success: this machined saw exactly os:reader
	}{
		{"reader asserting admin", reader, asserting("os:admin"), reset, codes.PermissionDenied, nil},
		{"reader asserting a role on an allowed method", reader, asserting("os:admin"), version, codes.PermissionDenied, nil},
		{"reader through a node gains nothing there", reader, metadata.AppendToOutgoingContext(t.Context(), "node", b.addr), reboot, codes.PermissionDenied, nil},
		{"impersonator asserting reader", imp, asserting("os:reader"), version, codes.OK, b.machined},
		{"impersonator asserting reader gets no more", imp, asserting("os:reader"), reboot, codes.PermissionDenied, nil},
		{"impersonator asserting nothing may do nothing", imp, t.Context(), version, codes.PermissionDenied, nil},
	} {
		err := tc.call(tc.client, tc.ctx)
		if status.Code(err) != tc.code {
			t.Errorf("%s: want %v, got %v", tc.name, tc.code, err)

			continue
		}

		if tc.seenBy != nil {
			if got := tc.seenBy.lastRoles(); !slices.Equal(got, []string{"os:reader"}) {
				t.Errorf("%s: machined saw %v", tc.name, got)
			}
		}
	}
}

func TestRejectedClientCertificates(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	n := startNode(t, ca)

	for name, cert := range map[string]tls.Certificate{
		"expired":       ca.client(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "os:admin"),
		"not yet valid": ca.client(t, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), "os:admin"),
		"other CA":      other.roleCert(t, "os:admin"),
	} {
		c := machine.NewMachineServiceClient(dial(t, ca, n.addr, cert))

		_, err := c.Version(t.Context(), &emptypb.Empty{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: want the handshake refused (Unavailable), got %v", name, err)
		}
	}

	// TLS 1.2 is refused even with a good certificate.
	old, err := grpc.NewClient(net.JoinHostPort(n.addr, "50000"), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MaxVersion: tls.VersionTLS12, RootCAs: ca.pool(), Certificates: []tls.Certificate{ca.roleCert(t, "os:admin")},
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	if _, err = machine.NewMachineServiceClient(old).Version(t.Context(), &emptypb.Empty{}); status.Code(err) != codes.Unavailable {
		t.Errorf("TLS 1.2: %v", err)
	}

	// No client certificate at all.
	conn, err := grpc.NewClient(net.JoinHostPort(n.addr, "50000"), grpc.WithTransportCredentials(credsNoCert(ca)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if _, err = machine.NewMachineServiceClient(conn).Version(t.Context(), &emptypb.Empty{}); status.Code(err) != codes.Unavailable {
		t.Errorf("no client certificate: %v", err)
	}
}

func TestCertificateRotation(t *testing.T) {
	ca1, ca2 := newCA(t), newCA(t)
	n := startNode(t, ca1)

	old := machine.NewMachineServiceClient(dial(t, ca1, n.addr, ca1.roleCert(t, "os:reader")))
	if _, err := old.Version(t.Context(), &emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}

	// Rotate to a new CA that no longer trusts the old one; apid's store picks the files up.
	writeCerts(t, ca2, n.certDir, n.addr)

	if reloaded, err := n.server.opts.Certs.Reload(); err != nil || !reloaded {
		t.Fatalf("reload: %v %v", reloaded, err)
	}

	fresh := machine.NewMachineServiceClient(dial(t, ca2, n.addr, ca2.roleCert(t, "os:reader")))
	if _, err := fresh.Version(t.Context(), &emptypb.Empty{}); err != nil {
		t.Errorf("new CA after rotation: %v", err)
	}

	stale := machine.NewMachineServiceClient(dial(t, ca1, n.addr, ca1.roleCert(t, "os:reader")))
	if _, err := stale.Version(t.Context(), &emptypb.Empty{}); status.Code(err) != codes.Unavailable {
		t.Errorf("old CA after rotation must be refused: %v", err)
	}
}

func TestMachineryClient(t *testing.T) {
	ca := newCA(t)
	a, b := startNode(t, ca), startNode(t, ca)

	c, err := client.New(t.Context(),
		client.WithEndpoints(a.addr),
		client.WithTLSConfig(&tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{ca.roleCert(t, "os:reader")}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	resp, err := c.Version(client.WithNodes(t.Context(), a.addr, b.addr))
	if err != nil {
		t.Fatal(err)
	}

	if len(resp.Messages) != 2 || resp.Messages[1].GetMetadata().GetHostname() != b.addr {
		t.Errorf("machinery client: %v", resp)
	}
}

// TestProcess runs apid as its own process (the test binary re-executed) and stops it with
// SIGTERM.
func TestProcess(t *testing.T) {
	ca := newCA(t)
	f := &fakeMachined{name: "proc"}
	sock := startFakeMachined(t, f)

	l := listenNode(t)
	addr := l.Addr().String()
	host, _, _ := net.SplitHostPort(addr)
	l.Close()

	dir := t.TempDir()
	writeCerts(t, ca, dir, host)

	cmd := exec.Command(os.Args[0], "--listen", addr, "--certs", dir, "--socket", sock, "--reload-interval", "100ms")
	cmd.Env = append(os.Environ(), "APID_TEST_PROCESS=1")
	cmd.Stderr = os.Stderr

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	var waitErr error

	exited := make(chan struct{})

	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()

	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	c := machine.NewMachineServiceClient(dial(t, ca, host, ca.roleCert(t, "os:reader")))

	var (
		v   *machine.VersionResponse
		err error
	)

	for range 100 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		v, err = c.Version(ctx, &emptypb.Empty{}, grpc.WaitForReady(true))

		cancel()

		if err == nil {
			break
		}
	}

	if err != nil || v.Messages[0].GetVersion().GetArch() != "proc" {
		t.Fatalf("version through the apid process: %v %v", v, err)
	}

	// Rotate to a new CA: the running process picks the files up without a restart.
	ca2 := newCA(t)
	writeCerts(t, ca2, dir, host)

	c2 := machine.NewMachineServiceClient(dial(t, ca2, host, ca2.roleCert(t, "os:reader")))

	for range 100 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err = c2.Version(ctx, &emptypb.Empty{})

		cancel()

		if err == nil {
			break
		}

		time.Sleep(100 * time.Millisecond)
	}

	if err != nil {
		t.Fatalf("rotated certificates not picked up: %v", err)
	}

	select {
	case <-exited:
		t.Fatal("apid restarted to pick up certificates")
	default:
	}

	cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("apid exited with %v after SIGTERM", waitErr)
		}
	case <-time.After(10 * time.Second):
		t.Error("apid did not stop on SIGTERM")
	}
}

// TestHungNodeCostsItsDialTimeout: a node that accepts TCP but never answers TLS must not take
// the whole fan-out down; the caller's own deadline (far longer than the dial timeout) is not
// reached, and the hung node reports an error.
func TestHungNodeCostsItsDialTimeout(t *testing.T) {
	ca := newCA(t)
	a := startNode(t, ca)

	hung := listenNode(t)
	defer hung.Close()

	acceptDone := make(chan struct{})

	go func() {
		defer close(acceptDone)

		var held []net.Conn

		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()

		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}

			held = append(held, c) // never answer
		}
	}()

	defer func() { hung.Close(); <-acceptDone }()

	hungHost, _, _ := net.SplitHostPort(hung.Addr().String())

	c := machine.NewMachineServiceClient(dial(t, ca, a.addr, ca.roleCert(t, "os:reader")))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	resp, err := c.Version(withNodes(ctx, a.addr, hungHost), &emptypb.Empty{})
	if err != nil {
		t.Fatalf("fan-out with a hung node: %v", err)
	}

	if len(resp.Messages) != 2 || resp.Messages[0].GetMetadata().GetError() != "" || resp.Messages[1].GetMetadata().GetError() == "" {
		t.Errorf("want a good reply and an error for the hung node: %v", resp)
	}
}
