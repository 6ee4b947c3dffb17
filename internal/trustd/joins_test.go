package trustd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func joinID(n int) string { return fmt.Sprintf("%016x", n) }

// TestJoinsStore: requests are recorded under their key's id with the latest addresses, decisions
// are read back, stale pending requests are dropped while decided ones stay, and the folder is
// bounded.
func TestJoinsStore(t *testing.T) {
	j := &Joins{Dir: filepath.Join(t.TempDir(), JoinsDir)}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	state, isNew, err := j.Seen(joinID(1), "10.0.0.1", []string{"w1", "10.0.0.1"}, t0)
	if err != nil || state != JoinPending || !isNew {
		t.Fatalf("first request: %v %v %v, want pending, new", state, isNew, err)
	}

	for i, addr := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.2"} {
		if _, isNew, err = j.Seen(joinID(1), addr, []string{"w1"}, t0.Add(time.Duration(i+1)*time.Minute)); err != nil || isNew {
			t.Fatalf("repeat %d: new %v, %v", i, isNew, err)
		}
	}

	list, err := j.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}

	r := list[0]
	if r.ID != joinID(1) || r.State != JoinPending || !r.FirstSeen.Equal(t0) || !r.LastSeen.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("request: %+v", r)
	}

	if got := strings.Join(r.Addresses, ","); got != "10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.2" {
		t.Errorf("addresses %s: want the latest %d, most recent last", got, maxJoinAddrs)
	}

	// Decisions: read back, only known states, only ids.
	if err = j.Decide(joinID(1), JoinApproved); err != nil {
		t.Fatal(err)
	}

	if state, _, _ = j.Seen(joinID(1), "10.0.0.2", nil, t0); state != JoinApproved {
		t.Errorf("after approval: %s", state)
	}

	if err = j.Decide("../../etc/passwd", JoinApproved); err == nil || !strings.Contains(err.Error(), "16 hex digits") {
		t.Errorf("a path as id: %v", err)
	}

	if err = j.Decide(joinID(2), "maybe"); err == nil {
		t.Error("accepted the decision maybe")
	}

	if _, _, err = j.Seen("ZZ", "10.0.0.9", nil, t0); err == nil {
		t.Error("recorded a bad id")
	}

	// A decision made before the key asked is listed too.
	if err = j.Decide(joinID(3), JoinDenied); err != nil {
		t.Fatal(err)
	}

	// Stale pending requests go; decided ones stay.
	if _, _, err = j.Seen(joinID(4), "10.0.0.4", nil, t0); err != nil {
		t.Fatal(err)
	}

	if err = j.Prune(t0.Add(JoinPendingTTL + 10*time.Minute)); err != nil {
		t.Fatal(err)
	}

	list, _ = j.List()

	var ids []string
	for _, r := range list {
		ids = append(ids, r.ID+"="+string(r.State))
	}

	if got, want := strings.Join(ids, " "), joinID(1)+"=approved "+joinID(3)+"=denied"; got != want {
		t.Errorf("after pruning: %s, want %s", got, want)
	}

	// Files are 0600 in a 0700 folder: they hold who asked.
	fi, err := os.Stat(filepath.Join(j.Dir, joinID(1)+".json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("request file: %v %v", fi, err)
	}
}

// TestJoinsLimit: at most MaxPendingJoins keys wait at once; a key already waiting or decided is
// still answered.
func TestJoinsLimit(t *testing.T) {
	j := &Joins{Dir: t.TempDir()}
	now := time.Now()

	for i := range MaxPendingJoins {
		if _, _, err := j.Seen(joinID(i), "10.0.0.1", nil, now); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}

	if _, _, err := j.Seen(joinID(1000), "10.0.0.1", nil, now); !errors.Is(err, ErrTooManyJoins) {
		t.Fatalf("request %d: %v, want ErrTooManyJoins", MaxPendingJoins+1, err)
	}

	if _, _, err := j.Seen(joinID(5), "10.0.0.1", nil, now); err != nil {
		t.Fatalf("a waiting key asking again: %v", err)
	}

	// Deciding one frees a place.
	if err := j.Decide(joinID(5), JoinDenied); err != nil {
		t.Fatal(err)
	}

	if _, _, err := j.Seen(joinID(1000), "10.0.0.1", nil, now); err != nil {
		t.Fatalf("after a decision: %v", err)
	}
}

// TestCSRNamesBounded: a request's record stays small whatever the CSR asks for.
func TestCSRNamesBounded(t *testing.T) {
	long := strings.Repeat("a", 5000)
	dns := make([]string, 100)

	for i := range dns {
		dns[i] = fmt.Sprintf("%d.%s", i, long)
	}

	names := CSRNames(&x509.CertificateRequest{Subject: pkix.Name{CommonName: long}, DNSNames: dns})
	if len(names) != maxJoinNames {
		t.Fatalf("%d names kept, want %d", len(names), maxJoinNames)
	}

	for _, n := range names {
		if len(n) > maxJoinName {
			t.Fatalf("a name of %d bytes kept", len(n))
		}
	}
}

// keyCSR is a node's CSR made with its own key.
func keyCSR(t *testing.T, key *ecdsa.PrivateKey, cn string) []byte {
	t.Helper()

	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn}, IPAddresses: []net.IP{net.ParseIP("10.5.0.9")},
	}, key)
	if err != nil {
		t.Fatal(err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func fromPeer(addr string, token string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 40000}})
	if token != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(TokenMetadataKey, token))
	}

	return ctx
}

func approvalServer(t *testing.T, token string) *Server {
	t.Helper()

	ca := newTestCA(t)
	dir := t.TempDir()
	crt, key := ca.serverPair(t, "127.0.0.1")

	if err := WriteFiles(dir, map[string][]byte{
		CACrt: ca.crtPEM, CAKey: ca.keyPEM, TokenFile: []byte(token), ServerCrt: crt, ServerKey: key,
	}); err != nil {
		t.Fatal(err)
	}

	store, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}

	return &Server{Certs: store, Joins: &Joins{Dir: filepath.Join(dir, JoinsDir)}, Log: zap.NewNop(), Limiter: &Limiter{Burst: 5, Refill: time.Hour}}
}

// TestApprovalPolicy: a CSR without a token waits (FailedPrecondition naming its id and the
// command) until an admin approves its key; then it and renewals with the same key are signed
// (server certificates only), a new key waits anew, and a denied key gets PermissionDenied.
// The token path is unchanged beside it.
func TestApprovalPolicy(t *testing.T) {
	s := approvalServer(t, testToken)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr := keyCSR(t, key, "w1")

	parsed, _ := x509.ParseCertificateRequest(mustPEM(t, csr))
	id := JoinID(parsed)

	_, err := s.Certificate(fromPeer("10.5.0.9", ""), &securityapi.CertificateRequest{Csr: csr})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "talosctl join approve "+id) {
		t.Fatalf("unapproved: %v, want FailedPrecondition naming talosctl join approve %s", err, id)
	}

	list, _ := s.Joins.List()
	if len(list) != 1 || list[0].ID != id || list[0].Addresses[0] != "10.5.0.9" || strings.Join(list[0].Names, ",") != "w1,10.5.0.9" {
		t.Fatalf("recorded: %+v", list)
	}

	// The token path still signs any key.
	if _, err = s.Certificate(fromPeer("10.5.0.8", testToken), &securityapi.CertificateRequest{Csr: csrPEM(t, &x509.CertificateRequest{})}); err != nil {
		t.Fatalf("token join: %v", err)
	}

	if err = s.Joins.Decide(id, JoinApproved); err != nil {
		t.Fatal(err)
	}

	for i := range 2 { // the join, then a renewal with the same key and no token
		resp, err := s.Certificate(fromPeer("10.5.0.9", ""), &securityapi.CertificateRequest{Csr: keyCSR(t, key, "w1")})
		if err != nil {
			t.Fatalf("approved key, request %d: %v", i, err)
		}

		crt, err := x509.ParseCertificate(mustPEM(t, resp.GetCrt()))
		if err != nil {
			t.Fatal(err)
		}

		if crt.IsCA || len(crt.ExtKeyUsage) != 1 || crt.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || len(crt.Subject.Organization) > 0 {
			t.Errorf("signed: CA %v, usages %v, organization %v; want a server certificate only", crt.IsCA, crt.ExtKeyUsage, crt.Subject.Organization)
		}
	}

	// Another key is another request.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err = s.Certificate(fromPeer("10.5.0.9", ""), &securityapi.CertificateRequest{Csr: keyCSR(t, other, "w1")}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a new key of an approved node: %v, want FailedPrecondition", err)
	}

	if err = s.Joins.Decide(id, JoinDenied); err != nil {
		t.Fatal(err)
	}

	if _, err = s.Certificate(fromPeer("10.5.0.9", ""), &securityapi.CertificateRequest{Csr: csr}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("denied: %v, want PermissionDenied denied", err)
	}

	// The signing policy holds without a token too: a CA request is refused and not recorded.
	before, _ := s.Joins.List()

	_, err = s.Certificate(fromPeer("10.5.0.7", ""), &securityapi.CertificateRequest{Csr: csrPEM(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x", Organization: []string{"os:admin"}}})})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CSR with a role: %v, want InvalidArgument", err)
	}

	if after, _ := s.Joins.List(); len(after) != len(before) {
		t.Errorf("a refused CSR was recorded: %d requests, was %d", len(after), len(before))
	}
}

// TestApprovalNewKeysRateLimited: each new key costs its address one failed attempt, so one
// address cannot fill the request folder.
func TestApprovalNewKeysRateLimited(t *testing.T) {
	s := approvalServer(t, testToken)

	var last error

	for range 10 {
		_, last = s.Certificate(fromPeer("10.5.0.66", ""), &securityapi.CertificateRequest{Csr: csrPEM(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}})})
	}

	if status.Code(last) != codes.ResourceExhausted {
		t.Fatalf("10 new keys from one address: %v, want ResourceExhausted", last)
	}

	if list, _ := s.Joins.List(); len(list) != 5 {
		t.Errorf("%d requests recorded, want the limiter's burst of 5", len(list))
	}
}

// TestTokenJoinsOff: a control plane without a token refuses the token path, even with what
// was once the right token, and still answers joins by approval.
func TestTokenJoinsOff(t *testing.T) {
	s := approvalServer(t, "")

	if len(s.Certs.Current().Token) != 0 {
		t.Fatal("token loaded")
	}

	_, err := s.Certificate(fromPeer("10.5.0.9", testToken), &securityapi.CertificateRequest{Csr: csrPEM(t, &x509.CertificateRequest{})})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "token joins are disabled") {
		t.Fatalf("a token on a control plane without one: %v, want PermissionDenied token joins are disabled", err)
	}

	_, err = s.Certificate(fromPeer("10.5.0.10", ""), &securityapi.CertificateRequest{Csr: csrPEM(t, &x509.CertificateRequest{})})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("join by approval: %v, want FailedPrecondition", err)
	}
}

func mustPEM(t *testing.T, data []byte) []byte {
	t.Helper()

	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM")
	}

	return block.Bytes
}
