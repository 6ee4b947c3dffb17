package trustd_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	gensecrets "github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/testenv"
	"github.com/talos-go/talos/internal/trustd"
)

// cluster is a generated cluster: one secrets bundle, control-plane and worker configs.
type cluster struct {
	bundle *gensecrets.Bundle
	cp, wk []byte
	caPool *x509.CertPool
	ca     *pki.CA
}

func newCluster(t *testing.T, cpAddr string, workerToken string) *cluster {
	t.Helper()

	bundle, cp, wk := testenv.Configs(t, cpAddr)
	c := &cluster{bundle: bundle, cp: cp, wk: wk}

	if workerToken != "" {
		c.wk = bytes.ReplaceAll(c.wk, []byte(bundle.TrustdInfo.Token), []byte(workerToken))
	}

	if bytes.Contains(c.wk, bundle.Certs.OS.Key) {
		t.Fatal("worker config carries the CA key")
	}

	c.caPool = x509.NewCertPool()
	c.caPool.AppendCertsFromPEM(bundle.Certs.OS.Crt)

	var err error
	if c.ca, err = pki.ParseCA(bundle.Certs.OS.Crt, bundle.Certs.OS.Key); err != nil {
		t.Fatal(err)
	}

	return c
}

// adminCert is a talosctl-style client certificate with role os:admin.
func (c *cluster) adminCert(t *testing.T) tls.Certificate {
	t.Helper()

	pair, err := c.ca.Issue(pki.Leaf{
		CommonName: "admin", Organizations: []string{"os:admin"},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: time.Hour,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(pair.Crt, pair.Key)
	if err != nil {
		t.Fatal(err)
	}

	return cert
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return crt
}

func exists(path string) bool {
	_, err := os.Stat(path)

	return err == nil
}

func apidDir(n *testenv.Node) string   { return filepath.Join(n.State, "system", "secrets", "apid") }
func trustdDir(n *testenv.Node) string { return filepath.Join(n.State, "system", "secrets", "trustd") }

// apidAddr is the node's apid, started by machined once its certificates exist.
func apidAddr(n *testenv.Node) string { return net.JoinHostPort(n.Address, "50000") }

// dialAPID opens an mTLS connection to apid and records the server certificates it sees.
func dialAPID(t *testing.T, c *cluster, addr string, seen func(*x509.Certificate)) *grpc.ClientConn {
	t.Helper()

	host, _, _ := net.SplitHostPort(addr)
	tlsCfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      c.caPool,
		ServerName:   host,
		Certificates: []tls.Certificate{c.adminCert(t)},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if seen != nil && len(cs.PeerCertificates) > 0 {
				seen(cs.PeerCertificates[0])
			}

			return nil
		},
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	return conn
}

func checkKeyModes(t *testing.T, dir string, names ...string) {
	t.Helper()

	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}

		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s/%s has mode %v, want 0600", dir, name, fi.Mode().Perm())
		}
	}
}

// TestWorkerJoins: a worker whose config has no CA key gets its API certificates from trustd on
// the control plane and serves apid with them.
func TestWorkerJoins(t *testing.T) {
	const cpAddr, wkAddr = "127.44.0.2", "127.44.0.3"

	c := newCluster(t, cpAddr, "")
	cp := testenv.StartNode(t, cpAddr, c.cp)
	testenv.MachinedBinary(t)

	started := time.Now()
	wk := testenv.StartNode(t, wkAddr, c.wk)

	testenv.WaitFor(t, "control plane trustd files", 90*time.Second, func() bool { return exists(filepath.Join(trustdDir(cp), trustd.ServerCrt)) })
	testenv.WaitFor(t, "worker apid certificates", 90*time.Second, func() bool { return exists(filepath.Join(apidDir(wk), certs.CA)) })
	t.Logf("worker process start to trustd-signed apid certificates on disk: %v", time.Since(started).Round(time.Millisecond))

	srv := readCert(t, filepath.Join(apidDir(wk), certs.ServerCrt))
	if _, err := srv.Verify(x509.VerifyOptions{Roots: c.caPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("worker server certificate does not verify against the OS CA: %v", err)
	}

	if err := srv.VerifyHostname(wkAddr); err != nil {
		t.Errorf("worker server certificate lacks its address: %v", err)
	}

	if srv.IsCA {
		t.Error("worker got a CA certificate")
	}

	// No client certificate at all: only a node holding the CA key (a control plane) issues
	// itself one, so a worker's files carry no role (upstream's CVE-2022-36103).
	if srv.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || len(srv.ExtKeyUsage) != 1 || len(srv.Subject.Organization) > 0 {
		t.Errorf("worker server certificate: usages %v, organization %v; want server auth only, none", srv.ExtKeyUsage, srv.Subject.Organization)
	}

	for _, f := range []string{certs.ClientCrt, certs.ClientKey} {
		if exists(filepath.Join(apidDir(wk), f)) {
			t.Errorf("the worker holds apid's %s: a worker must have no client certificate", f)
		}
	}

	checkKeyModes(t, apidDir(wk), certs.ServerKey, certs.ServerCrt)
	checkKeyModes(t, trustdDir(cp), trustd.CAKey, trustd.TokenFile, trustd.ServerKey)

	if exists(trustdDir(wk)) {
		t.Error("the worker has a trustd folder: it must not hold the CA")
	}

	// The signature was trustd's: the control plane's trustd log records it, without the token.
	trustdLog := filepath.Join(cp.State, "EPHEMERAL", "log", "trustd.log")
	testenv.WaitFor(t, "trustd log of the signing", 90*time.Second, func() bool {
		data, _ := os.ReadFile(trustdLog)

		return bytes.Contains(data, []byte("signed certificate"))
	})

	if data, _ := os.ReadFile(trustdLog); bytes.Contains(data, []byte(c.bundle.TrustdInfo.Token)) {
		t.Error("trustd logged the token")
	}

	// The worker's apid (started by its machined) serves the trustd-signed certificate.
	addr := apidAddr(wk)

	var (
		mu     sync.Mutex
		served *x509.Certificate
	)

	conn := dialAPID(t, c, addr, func(crt *x509.Certificate) { mu.Lock(); served = crt; mu.Unlock() })

	var resp *machine.VersionResponse

	testenv.WaitFor(t, "worker apid answering", 90*time.Second, func() bool {
		var err error
		resp, err = machine.NewMachineServiceClient(conn).Version(context.Background(), &emptypb.Empty{})

		return err == nil
	})

	if len(resp.GetMessages()) != 1 {
		t.Fatalf("version reply has %d messages", len(resp.GetMessages()))
	}

	mu.Lock()
	defer mu.Unlock()

	if served == nil || served.Issuer.String() != c.ca.Crt.Subject.String() {
		t.Fatalf("apid served %v, want a certificate issued by the OS CA", served)
	}

	if _, err := served.Verify(x509.VerifyOptions{Roots: c.caPool}); err != nil {
		t.Fatal(err)
	}

	if served.SerialNumber.Cmp(srv.SerialNumber) != 0 {
		t.Errorf("apid serves serial %v, the trustd-signed file has %v", served.SerialNumber, srv.SerialNumber)
	}

	// A worker cannot generate client configurations (no CA key); a control plane can.
	if _, err := machine.NewMachineServiceClient(conn).GenerateClientConfiguration(context.Background(),
		&machine.GenerateClientConfigurationRequest{Roles: []string{"os:reader"}}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("GenerateClientConfiguration on a worker: got %v, want FailedPrecondition", err)
	}

	cpConn := dialAPID(t, c, apidAddr(cp), nil)

	var gen *machine.GenerateClientConfigurationResponse

	testenv.WaitFor(t, "control plane apid answering", 90*time.Second, func() bool {
		var err error
		gen, err = machine.NewMachineServiceClient(cpConn).GenerateClientConfiguration(context.Background(),
			&machine.GenerateClientConfigurationRequest{Roles: []string{"os:reader"}, CrtTtl: durationpb.New(time.Hour)})

		return status.Code(err) != codes.Unavailable
	})

	if len(gen.GetMessages()) != 1 {
		t.Fatalf("GenerateClientConfiguration: %d messages", len(gen.GetMessages()))
	}

	cfg, err := clientconfig.FromBytes(gen.GetMessages()[0].GetTalosconfig())
	if err != nil {
		t.Fatal(err)
	}

	pair, err := tls.X509KeyPair(gen.GetMessages()[0].GetCrt(), gen.GetMessages()[0].GetKey())
	if err != nil {
		t.Fatal(err)
	}

	if cfg.Contexts[cfg.Context] == nil || cfg.Contexts[cfg.Context].Crt == "" {
		t.Fatalf("talosconfig has no current context with a certificate")
	}

	reader, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}

	if o := reader.Subject.Organization; len(o) != 1 || o[0] != "os:reader" || reader.NotAfter.Sub(reader.NotBefore) > 2*time.Hour {
		t.Errorf("generated certificate: organization %v, lifetime %v", o, reader.NotAfter.Sub(reader.NotBefore))
	}

	// The reader certificate works for reading and is refused for admin calls.
	readerConn, err := grpc.NewClient(apidAddr(cp), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: c.caPool, ServerName: cp.Address, Certificates: []tls.Certificate{pair},
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer readerConn.Close()

	if _, err = machine.NewMachineServiceClient(readerConn).Version(context.Background(), &emptypb.Empty{}); err != nil {
		t.Errorf("reader Version: %v", err)
	}

	if _, err = machine.NewMachineServiceClient(readerConn).GenerateClientConfiguration(context.Background(),
		&machine.GenerateClientConfigurationRequest{Roles: []string{"os:admin"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader GenerateClientConfiguration: got %v, want PermissionDenied", err)
	}

	// The OS root (CA key, token) is readable by os:admin only.
	getRoot := &cosiapi.GetRequest{Namespace: "secrets", Type: "OSRootSecrets.secrets.talos.dev", Id: "os"}

	if _, err = cosiapi.NewStateClient(readerConn).Get(context.Background(), getRoot); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader reading OSRoot: got %v, want PermissionDenied", err)
	}

	if _, err = cosiapi.NewStateClient(readerConn).Get(context.Background(),
		&cosiapi.GetRequest{Namespace: "network", Type: "HostnameStatuses.net.talos.dev", Id: "hostname"}); err != nil {
		t.Errorf("reader reading HostnameStatus: %v", err)
	}

	if _, err = cosiapi.NewStateClient(cpConn).Get(context.Background(), getRoot); err != nil {
		t.Errorf("admin reading OSRoot: %v", err)
	}
}

// TestWrongTokenRefused: trustd refuses a wrong or missing token with PermissionDenied and signs
// nothing; a worker with a wrong token gets no certificates.
func TestWrongTokenRefused(t *testing.T) {
	const cpAddr, wkAddr = "127.44.1.2", "127.44.1.3"

	c := newCluster(t, cpAddr, "wrong0.0123456789abcdef")
	cp := testenv.StartNode(t, cpAddr, c.cp)
	wk := testenv.StartNode(t, wkAddr, c.wk)

	testenv.WaitFor(t, "trustd serving", 90*time.Second, func() bool { return exists(filepath.Join(trustdDir(cp), trustd.ServerCrt)) })

	// The test calls from its own address, as another machine would.
	client := trustdClient(t, c, cpAddr, "127.44.1.9")
	csr := testCSR(t, "node", nil)

	var code codes.Code

	testenv.WaitFor(t, "trustd answering", 90*time.Second, func() bool {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "token", "not-the-token")
		_, err := client.Certificate(ctx, &securityapi.CertificateRequest{Csr: csr})
		code = status.Code(err)

		return code != codes.Unavailable
	})

	if code != codes.PermissionDenied {
		t.Fatalf("wrong token: got %v, want PermissionDenied", code)
	}

	// No token at all is a join by approval (docs/join-approval.md): it waits for an admin.
	if _, err := client.Certificate(context.Background(), &securityapi.CertificateRequest{Csr: csr}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("missing token: got %v, want FailedPrecondition (waiting for approval)", err)
	}

	// The right token with a CSR asking for a CA is refused too.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "token", c.bundle.TrustdInfo.Token)
	if _, err := client.Certificate(ctx, &securityapi.CertificateRequest{Csr: testCSR(t, "ca", caConstraint(t))}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CA CSR: got %v, want InvalidArgument", err)
	}

	// The worker with the wrong token was refused: trustd logged refusals, signed nothing, and
	// the worker has no certificates.
	trustdLog := filepath.Join(cp.State, "EPHEMERAL", "log", "trustd.log")
	testenv.WaitFor(t, "refusal of the worker logged", 90*time.Second, func() bool {
		data, _ := os.ReadFile(trustdLog)

		return bytes.Contains(data, []byte(`"peer": "`+wkAddr+`"`)) || bytes.Contains(data, []byte(`"peer":"`+wkAddr+`"`))
	})

	data, _ := os.ReadFile(trustdLog)
	if bytes.Contains(data, []byte("signed certificate")) {
		t.Errorf("trustd signed something:\n%s", data)
	}

	for _, secret := range []string{c.bundle.TrustdInfo.Token, "wrong0.0123456789abcdef", "not-the-token"} {
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("trustd logged a token")
		}
	}

	if exists(filepath.Join(apidDir(wk), certs.ServerCrt)) {
		t.Error("worker with a wrong token has certificates")
	}

	// Failed attempts are limited per peer: after the burst, even the right token is turned
	// away from that peer, while another peer is still served.
	bad := trustdClient(t, c, cpAddr, "127.44.1.10")
	wrong := metadata.AppendToOutgoingContext(context.Background(), "token", "guess")

	var err error

	for i := range 5 {
		if _, err = bad.Certificate(wrong, &securityapi.CertificateRequest{Csr: csr}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("guess %d: got %v, want PermissionDenied", i, err)
		}
	}

	if _, err = bad.Certificate(ctx, &securityapi.CertificateRequest{Csr: csr}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after the burst: got %v, want ResourceExhausted", err)
	}

	good := trustdClient(t, c, cpAddr, "127.44.1.11")

	resp, err := good.Certificate(ctx, &securityapi.CertificateRequest{Csr: csr})
	if err != nil {
		t.Fatalf("another peer with the right token: %v", err)
	}

	crt, err := x509.ParseCertificate(pemBytes(t, resp.GetCrt()))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = crt.Verify(x509.VerifyOptions{Roots: c.caPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil || crt.IsCA {
		t.Fatalf("signed certificate: CA=%v, verify: %v", crt.IsCA, err)
	}
}

func pemBytes(t *testing.T, data []byte) []byte {
	t.Helper()

	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM block")
	}

	return block.Bytes
}

// TestRotation: with a short lifetime, the certificates of both nodes rotate, apid serves the
// new ones, and a stream opened before the rotation keeps delivering after it.
func TestRotation(t *testing.T) {
	const cpAddr, wkAddr = "127.44.2.2", "127.44.2.3"

	c := newCluster(t, cpAddr, "")
	cp := testenv.StartNode(t, cpAddr, c.cp, "--cert-lifetime", "6s")
	wk := testenv.StartNode(t, wkAddr, c.wk, "--cert-lifetime", "6s")

	testenv.WaitFor(t, "control plane apid certificates", 90*time.Second, func() bool { return exists(filepath.Join(apidDir(cp), certs.CA)) })
	testenv.WaitFor(t, "worker apid certificates", 90*time.Second, func() bool { return exists(filepath.Join(apidDir(wk), certs.CA)) })

	first := readCert(t, filepath.Join(apidDir(cp), certs.ServerCrt))
	if life := first.NotAfter.Sub(first.NotBefore); life > time.Hour {
		t.Fatalf("lifetime %v: the test lifetime was not applied", life)
	}

	addr := apidAddr(cp)

	var (
		mu      sync.Mutex
		serials = map[string]bool{}
	)

	conn := dialAPID(t, c, addr, func(crt *x509.Certificate) { mu.Lock(); serials[crt.SerialNumber.String()] = true; mu.Unlock() })
	api := machine.NewMachineServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a stalled stream fails, not hangs
	defer cancel()

	// The long-lived stream: the control plane's trustd log, followed. Each worker renewal is a
	// signing, hence a new line.
	var stream grpc.ServerStreamingClient[common.Data]

	testenv.WaitFor(t, "log stream opened", 90*time.Second, func() bool {
		var err error
		if stream, err = api.Logs(ctx, &machine.LogsRequest{Namespace: "system", Id: "trustd", Follow: true, TailLines: 1}); err != nil {
			return false
		}

		_, err = stream.Recv()

		return err == nil
	})

	// The worker's apid log, followed through the control plane: control plane apid -> worker
	// apid, a node-to-node call with the control plane's own (rotating) client certificate. The
	// worker's apid logs each reload of its renewed certificates. (A worker has no client
	// certificate and proxies nowhere.)
	var viaCP grpc.ServerStreamingClient[common.Data]

	testenv.WaitFor(t, "proxied log stream opened", 90*time.Second, func() bool {
		var err error
		if viaCP, err = api.Logs(metadata.AppendToOutgoingContext(ctx, "node", wkAddr),
			&machine.LogsRequest{Namespace: "system", Id: "apid", Follow: true, TailLines: 1}); err != nil {
			return false
		}

		_, err = viaCP.Recv()

		return err == nil
	})

	mu.Lock()
	firstSerials := len(serials)
	mu.Unlock()

	if firstSerials != 1 {
		t.Fatalf("saw %d server certificates on the first connection", firstSerials)
	}

	// Wait until apid serves a rotated certificate on a new connection.
	testenv.WaitFor(t, "apid serving a rotated certificate", 90*time.Second, func() bool {
		c2 := dialAPID(t, c, addr, func(crt *x509.Certificate) { mu.Lock(); serials[crt.SerialNumber.String()] = true; mu.Unlock() })
		_, err := machine.NewMachineServiceClient(c2).Version(ctx, &emptypb.Empty{})
		c2.Close()

		mu.Lock()
		defer mu.Unlock()

		return err == nil && len(serials) > 1
	})

	// The worker renewed through trustd as well.
	wkFirst := readCert(t, filepath.Join(apidDir(wk), certs.ServerCrt)).SerialNumber
	testenv.WaitFor(t, "worker certificate rotated", 90*time.Second, func() bool {
		return readCert(t, filepath.Join(apidDir(wk), certs.ServerCrt)).SerialNumber.Cmp(wkFirst) != 0
	})

	// Both old streams are still delivering: a signing logged after the rotations arrives.
	rotated := time.Now()

	for name, w := range map[string]struct {
		s   grpc.ServerStreamingClient[common.Data]
		msg string
	}{"direct": {stream, "signed certificate"}, "through the control plane": {viaCP, "certificates reloaded"}} {
		for seen := false; !seen; {
			msg, err := w.s.Recv()
			if err != nil {
				t.Fatalf("%s stream broke after the rotation: %v", name, err)
			}

			seen = loggedAfter(string(msg.GetBytes()), w.msg, rotated)
		}
	}

	checkKeyModes(t, apidDir(cp), certs.ServerKey, certs.ClientKey)
	checkKeyModes(t, apidDir(wk), certs.ServerKey)
}

// trustdClient calls trustd at addr from the source address from.
func trustdClient(t *testing.T, c *cluster, addr, from string) securityapi.SecurityServiceClient {
	t.Helper()

	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}

	conn, err := grpc.NewClient(net.JoinHostPort(addr, "50001"),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.caPool, ServerName: addr})))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	return securityapi.NewSecurityServiceClient(conn)
}

func caConstraint(t *testing.T) []pkix.Extension {
	t.Helper()

	// BasicConstraints{cA: TRUE}, critical.
	return []pkix.Extension{{Id: []int{2, 5, 29, 19}, Critical: true, Value: []byte{0x30, 0x03, 0x01, 0x01, 0xff}}}
}

func testCSR(t *testing.T, cn string, ext []pkix.Extension) []byte {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn}, ExtraExtensions: ext,
	}, key)
	if err != nil {
		t.Fatal(err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// loggedAfter reports whether the log text (zap's JSON lines, ts in seconds since the epoch:
// trustd's and apid's) holds message logged after t.
func loggedAfter(text, message string, t time.Time) bool {
	for _, line := range strings.Split(text, "\n") {
		var entry struct {
			TS  float64 `json:"ts"`
			Msg string  `json:"msg"`
		}

		if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != message {
			continue
		}

		if time.Unix(0, int64(entry.TS*float64(time.Second))).After(t) {
			return true
		}
	}

	return false
}
