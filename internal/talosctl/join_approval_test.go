package talosctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	gensecrets "github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/testenv"
	"github.com/talos-go/talos/internal/trustd"
)

// approvalCluster is a generated cluster whose worker configs carry no machine.token.
type approvalCluster struct {
	bundle     *gensecrets.Bundle
	cp, wk     []byte // the control plane's (with the token) and a token-less worker's
	cpNoToken  []byte
	wkWithTok  []byte
	talosconfs map[string]string // role -> talosconfig path
}

func newApprovalCluster(t *testing.T, cpAddr string) *approvalCluster {
	t.Helper()

	bundle, cp, wk := testenv.Configs(t, cpAddr)

	// `token: ` with nothing after it: machine.token is empty (the cluster's bootstrap token is
	// another value).
	noToken := func(cfg []byte) []byte {
		out := bytes.ReplaceAll(cfg, []byte(bundle.TrustdInfo.Token), nil)
		if bytes.Equal(out, cfg) {
			t.Fatal("machine.token not found in the generated config")
		}

		return out
	}

	c := &approvalCluster{bundle: bundle, cp: cp, wkWithTok: wk}
	c.wk, c.cpNoToken = noToken(c.wkWithTok), noToken(c.cp)

	ca, err := pki.ParseCA(bundle.Certs.OS.Crt, bundle.Certs.OS.Key)
	if err != nil {
		t.Fatal(err)
	}

	c.talosconfs = map[string]string{}

	for _, r := range []string{"os:admin", "os:operator", "os:reader"} {
		pair, err := ca.Issue(pki.Leaf{
			CommonName: r, Organizations: []string{r},
			ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: time.Hour,
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}

		path := filepath.Join(t.TempDir(), strings.ReplaceAll(r, ":", "-")+".yaml")
		if err = clientconfig.NewConfig("test", []string{cpAddr}, bundle.Certs.OS.Crt, pair).Save(path); err != nil {
			t.Fatal(err)
		}

		c.talosconfs[r] = path
	}

	return c
}

func exists(path string) bool {
	_, err := os.Stat(path)

	return err == nil
}

func apidServerCrt(n *testenv.Node) string {
	return filepath.Join(n.State, "system", "secrets", "apid", "server.crt")
}

func readCrt(t *testing.T, path string) *x509.Certificate {
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

var joinIDInLog = regexp.MustCompile(`talosctl join approve ([0-9a-f]{16})`)

// waitJoinID waits for a token-less worker to say, on its console, which request to approve.
func waitJoinID(t *testing.T, n *testenv.Node) string {
	t.Helper()

	var id string

	testenv.WaitFor(t, "the worker naming its join request", 90*time.Second, func() bool {
		if m := joinIDInLog.FindStringSubmatch(n.Output.String()); m != nil {
			id = m[1]
		}

		return id != ""
	})

	return id
}

// joinStatus reads a node's own JoinStatus on its machined socket (its apid has no certificate
// to serve with yet).
func joinStatus(t *testing.T, n *testenv.Node) resources.JoinStatusSpec {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	res, err := safe.StateGetByID[*resources.JoinStatus](ctx, n.Client(t).COSI, resources.JoinStatusID)
	if err != nil {
		return resources.JoinStatusSpec{State: err.Error()}
	}

	return *res.TypedSpec()
}

// TestJoinByApproval: on process nodes, a worker whose config has no machine.token waits (its
// console and JoinStatus say so, its apid has no certificate) while the control plane lists its
// request as pending; a reader's or operator's approval is refused; an admin's `talosctl join
// approve` gets it signed and its apid serving. A second token-less worker, denied, stays without
// a certificate and says it was denied.
func TestJoinByApproval(t *testing.T) {
	isolate(t)

	const cpAddr, wk1Addr, wk2Addr = "127.46.7.2", "127.46.7.3", "127.46.7.4"

	// Short-lived certificates on every node, so the test sees a renewal.
	lifetime := []string{"--cert-lifetime", "12s"}

	c := newApprovalCluster(t, cpAddr)
	testenv.StartNode(t, cpAddr, c.cp, lifetime...)
	wk1 := testenv.StartNode(t, wk1Addr, c.wk, lifetime...)

	as := func(role string, args ...string) (int, string, string) {
		return run(t, append([]string{"--talosconfig", c.talosconfs[role], "-e", cpAddr}, args...)...)
	}

	id := waitJoinID(t, wk1)

	// The control plane lists the request, pending, under the id the worker shows.
	var out string

	testenv.WaitFor(t, "the request listed pending on the control plane", 90*time.Second, func() error {
		code, o, e := as("os:reader", "-n", cpAddr, "get", "joinrequests")
		out = o

		if code == 0 && strings.Contains(o, id) && strings.Contains(o, "pending") {
			return nil
		}

		return fmt.Errorf("exit %d:\n%s%s", code, o, e)
	})
	mustContain(t, out, wk1Addr)

	testenv.WaitFor(t, "the worker's JoinStatus waiting", 60*time.Second, func() bool {
		st := joinStatus(t, wk1)

		return st.State == "waiting" && st.ID == id && strings.Contains(st.Message, "talosctl join approve "+id)
	})

	if !strings.Contains(wk1.Output.String(), "waiting for approval") {
		t.Error("the worker's console does not say it waits for approval")
	}

	if exists(apidServerCrt(wk1)) {
		t.Fatal("an unapproved worker has an apid certificate")
	}

	// Only os:admin decides.
	for _, r := range []string{"os:reader", "os:operator"} {
		code, _, stderr := as(r, "-n", cpAddr, "join", "approve", id)
		if code == 0 || !strings.Contains(stderr, "requires role os:admin") {
			t.Fatalf("%s approving: exit %d, stderr %q; want refused, naming os:admin", r, code, stderr)
		}
	}

	// The worker asks again after the refusals (the control plane's request shows it), and its
	// request is still pending: nothing was decided.
	refused := time.Now()

	testenv.WaitFor(t, "the worker asking again after the refusals", 60*time.Second, func() error {
		code, o, e := as("os:reader", "-n", cpAddr, "get", "joinrequests", id, "-o", "yaml")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, e)
		}

		if !regexp.MustCompile(`(?m)^\s+state: pending$`).MatchString(o) {
			t.Fatalf("the request is no longer pending after refused approvals:\n%s", o)
		}

		m := regexp.MustCompile(`(?m)^\s+lastSeen: (\S+)$`).FindStringSubmatch(o)
		if m == nil {
			return fmt.Errorf("no lastSeen in\n%s", o)
		}

		seen, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return fmt.Errorf("lastSeen: %w", err)
		}

		if !seen.After(refused) {
			return fmt.Errorf("last seen %s, the refusals ended %s", m[1], refused.Format(time.RFC3339Nano))
		}

		return nil
	})

	if exists(apidServerCrt(wk1)) {
		t.Fatal("the worker got a certificate after refused approvals")
	}

	started := time.Now()

	code, o, stderr := as("os:admin", "-n", cpAddr, "join", "approve", id)
	if code != 0 || !strings.Contains(o, "join request "+id+" approved") {
		t.Fatalf("admin approving: exit %d\n%s%s", code, o, stderr)
	}

	testenv.WaitFor(t, "the approved worker's apid certificate", 90*time.Second, func() bool { return exists(apidServerCrt(wk1)) })
	t.Logf("approval to the worker's certificate on disk: %v", time.Since(started).Round(time.Millisecond))

	// Its apid serves: the control plane forwards to it.
	testenv.WaitFor(t, "the worker's apid serving", 90*time.Second, func() bool {
		code, o, _ := as("os:admin", "-n", wk1Addr, "version")

		return code == 0 && strings.Contains(o, "Server:")
	})

	if st := joinStatus(t, wk1); st.State != "signed" {
		t.Errorf("the approved worker's JoinStatus: %+v, want signed", st)
	}

	if _, o, _ = as("os:reader", "-n", cpAddr, "get", "joinrequests"); !strings.Contains(o, "approved") {
		t.Errorf("get joinrequests after approval:\n%s", o)
	}

	// A renewal: a new certificate for the same node key, signed without any token.
	first := readCrt(t, apidServerCrt(wk1))

	testenv.WaitFor(t, "the approved worker's renewal", 60*time.Second, func() bool {
		return readCrt(t, apidServerCrt(wk1)).SerialNumber.Cmp(first.SerialNumber) != 0
	})

	if renewed := readCrt(t, apidServerCrt(wk1)); !bytes.Equal(renewed.RawSubjectPublicKeyInfo, first.RawSubjectPublicKeyInfo) {
		t.Error("the renewal changed the node key: an admin would have to approve it again")
	}

	// A restart keeps the node key (STATE) and the decision (the control plane's STATE): the
	// worker is signed again without asking anyone.
	wk1.Stop(t)

	if err := os.Remove(apidServerCrt(wk1)); err != nil {
		t.Fatal(err)
	}

	wk1 = testenv.StartNodeArgs(t, wk1.State, append([]string{"--platform", "container", "--state", wk1.State, "--address", wk1Addr}, lifetime...)...)
	testenv.WaitFor(t, "the restarted worker's certificate", 90*time.Second, func() bool { return exists(apidServerCrt(wk1)) })

	if !strings.Contains(wk1.Output.String(), "talosctl join approve "+id) {
		t.Error("the restarted worker asked with another key")
	}

	if strings.Contains(wk1.Output.String(), "join request waiting for approval") {
		t.Error("the restarted worker waited for approval again")
	}

	// A second token-less worker, denied.
	wk2 := testenv.StartNode(t, wk2Addr, c.wk, lifetime...)
	id2 := waitJoinID(t, wk2)

	if id2 == id {
		t.Fatal("two workers share a join request id")
	}

	testenv.WaitFor(t, "the second request listed", 90*time.Second, func() bool {
		_, o, _ := as("os:reader", "-n", cpAddr, "get", "joinrequests", id2)

		return strings.Contains(o, "pending")
	})

	if code, o, stderr = as("os:admin", "-n", cpAddr, "join", "deny", id2); code != 0 {
		t.Fatalf("admin denying: exit %d\n%s%s", code, o, stderr)
	}

	testenv.WaitFor(t, "the denied worker's JoinStatus", 90*time.Second, func() bool {
		st := joinStatus(t, wk2)

		return st.State == "denied" && strings.Contains(st.Message, "denied")
	})

	if !strings.Contains(wk2.Output.String(), "join request "+id2+" denied") {
		t.Error("the denied worker's console does not say it was denied")
	}

	if exists(apidServerCrt(wk2)) {
		t.Fatal("a denied worker has an apid certificate")
	}
}

// TestTokenJoinsOffOnNodes: a control plane whose config has no machine.token refuses a worker
// presenting the right (old) token: token joins are off there.
func TestTokenJoinsOffOnNodes(t *testing.T) {
	isolate(t)

	const cpAddr, wkAddr = "127.46.7.5", "127.46.7.6"

	c := newApprovalCluster(t, cpAddr)
	cp := testenv.StartNode(t, cpAddr, c.cpNoToken)
	wk := testenv.StartNode(t, wkAddr, c.wkWithTok)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.bundle.Certs.OS.Crt)

	conn, err := grpc.NewClient(net.JoinHostPort(cpAddr, "50001"), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: cpAddr,
	})))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	csr, _, err := pki.NewCSR(pki.Leaf{CommonName: "probe", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		t.Fatal(err)
	}

	var callErr error

	testenv.WaitFor(t, "trustd answering on the token-less control plane", 90*time.Second, func() bool {
		ctx := metadata.AppendToOutgoingContext(context.Background(), trustd.TokenMetadataKey, c.bundle.TrustdInfo.Token)
		_, callErr = securityapi.NewSecurityServiceClient(conn).Certificate(ctx, &securityapi.CertificateRequest{Csr: csr})

		return status.Code(callErr) != codes.Unavailable
	})

	if status.Code(callErr) != codes.PermissionDenied || !strings.Contains(callErr.Error(), "token joins are disabled") {
		t.Fatalf("the right token on a control plane without one: %v, want PermissionDenied, token joins are disabled", callErr)
	}

	// The worker holding the token is refused the same way and gets no certificate.
	testenv.WaitFor(t, "the worker refused", 90*time.Second, func() bool {
		return strings.Contains(wk.Output.String(), "token joins are disabled")
	})

	if exists(apidServerCrt(wk)) {
		t.Fatal("a worker joined by token on a control plane without one")
	}

	_ = cp
}
