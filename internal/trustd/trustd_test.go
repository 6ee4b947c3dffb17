package trustd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/pki"
)

const testToken = "abcdef.0123456789abcdef"

// Written out here rather than taken from pki, so the test checks the wire values.
var (
	oidExtKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidServerAuth  = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidClientAuth  = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}
)

type testCA struct {
	crt    *x509.Certificate
	crtPEM []byte
	keyPEM []byte
	key    *ecdsa.PrivateKey
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca", Organization: []string{"talos"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}

	crt, _ := x509.ParseCertificate(der)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)

	return &testCA{
		crt: crt, key: key,
		crtPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

func (ca *testCA) issuer() *pki.CA { return &pki.CA{Crt: ca.crt, CrtPEM: ca.crtPEM, Key: ca.key} }

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.crt)

	return p
}

// serverPair issues trustd's serving certificate for ip.
func (ca *testCA) serverPair(t testing.TB, ip string) (crtPEM, keyPEM []byte) {
	t.Helper()

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))

	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "trustd"},
		IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore:   time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca.crt, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}

	keyDER, _ := x509.MarshalECPrivateKey(key)

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func csrPEM(t testing.TB, tmpl *x509.CertificateRequest) []byte {
	t.Helper()

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func ext(t testing.TB, oid asn1.ObjectIdentifier, v any) pkix.Extension {
	t.Helper()

	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}

	return pkix.Extension{Id: oid, Value: b}
}

func TestCheckCSR(t *testing.T) {
	uri, _ := url.Parse("spiffe://cluster/node")

	for _, tc := range []struct {
		name string
		tmpl *x509.CertificateRequest
		ok   bool
	}{
		{name: "server", ok: true, tmpl: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "node"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.2")}, DNSNames: []string{"node"},
			ExtraExtensions: []pkix.Extension{ext(t, oidExtKeyUsage, []asn1.ObjectIdentifier{oidServerAuth})},
		}},
		// The join token buys no role: no impersonator, no client certificate at all
		// (upstream's CVE-2022-36103).
		{name: "impersonator client", tmpl: &x509.CertificateRequest{
			Subject:         pkix.Name{CommonName: "node", Organization: []string{"os:impersonator"}},
			ExtraExtensions: []pkix.Extension{ext(t, oidExtKeyUsage, []asn1.ObjectIdentifier{oidClientAuth})},
		}},
		{name: "impersonator organization", tmpl: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node", Organization: []string{"os:impersonator"}}}},
		{name: "client auth", tmpl: &x509.CertificateRequest{
			Subject:         pkix.Name{CommonName: "node"},
			ExtraExtensions: []pkix.Extension{ext(t, oidExtKeyUsage, []asn1.ObjectIdentifier{oidServerAuth, oidClientAuth})},
		}},
		{name: "no extensions", ok: true, tmpl: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node"}}},
		{name: "digital signature usage", ok: true, tmpl: &x509.CertificateRequest{
			ExtraExtensions: []pkix.Extension{ext(t, oidKeyUsage, asn1.BitString{Bytes: []byte{0x80}, BitLength: 1})},
		}},
		{name: "ca", tmpl: &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{ext(t, oidBasicConstraints, struct{ IsCA bool }{true})}}},
		{name: "cert sign usage", tmpl: &x509.CertificateRequest{
			ExtraExtensions: []pkix.Extension{ext(t, oidKeyUsage, asn1.BitString{Bytes: []byte{0x04}, BitLength: 6})},
		}},
		{name: "code signing", tmpl: &x509.CertificateRequest{
			ExtraExtensions: []pkix.Extension{ext(t, oidExtKeyUsage, []asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 3}})},
		}},
		{name: "admin role", tmpl: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x", Organization: []string{"os:admin"}}}},
		{name: "uri SAN", tmpl: &x509.CertificateRequest{URIs: []*url.URL{uri}}},
		{name: "other extension", tmpl: &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 2, 3}, Value: []byte{5, 0}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := CheckCSR(csrPEM(t, tc.tmpl))
			if tc.ok != (err == nil) {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}

			if err != nil {
				return
			}

			ca := newTestCA(t)

			crtPEM, err := Sign(ca.issuer(), csr, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}

			block, _ := pem.Decode(crtPEM)
			crt, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}

			if crt.IsCA || crt.KeyUsage&x509.KeyUsageCertSign != 0 {
				t.Error("signed a CA")
			}

			// A server certificate only, whatever was asked: no role, no client use.
			if !slices.Equal(crt.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(crt.Subject.Organization) > 0 {
				t.Errorf("usages %v, organization %v: want server authentication only, no organization", crt.ExtKeyUsage, crt.Subject.Organization)
			}

			if _, err = crt.Verify(x509.VerifyOptions{Roots: ca.pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
				t.Error("the signed certificate verifies as a client certificate")
			}

			if _, err = crt.Verify(x509.VerifyOptions{Roots: ca.pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Error(err)
			}

			if d := crt.NotAfter.Sub(crt.NotBefore); d > time.Hour+2*time.Minute {
				t.Errorf("lifetime %v", d)
			}
		})
	}

	for _, garbage := range [][]byte{nil, []byte("not pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1, 2, 3}})} {
		if _, err := CheckCSR(garbage); err == nil {
			t.Errorf("accepted %q", garbage)
		}
	}
}

func TestSignCapsLifetimeAtCA(t *testing.T) {
	ca := newTestCA(t)
	csr, err := CheckCSR(csrPEM(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "n"}}))
	if err != nil {
		t.Fatal(err)
	}

	crtPEM, err := Sign(ca.issuer(), csr, 365*24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	block, _ := pem.Decode(crtPEM)
	crt, _ := x509.ParseCertificate(block.Bytes)

	if crt.NotAfter.After(ca.crt.NotAfter) {
		t.Errorf("certificate outlives its CA: %v > %v", crt.NotAfter, ca.crt.NotAfter)
	}

	if !slices.Equal(crt.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("default usages %v, want server auth only", crt.ExtKeyUsage)
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Limiter{Burst: 3, Refill: 10 * time.Second, Now: func() time.Time { return now }}

	for i := range 3 {
		if !l.Allowed("a") {
			t.Fatalf("attempt %d refused", i)
		}

		l.Failed("a")
	}

	if l.Allowed("a") {
		t.Fatal("peer allowed after the burst")
	}

	if !l.Allowed("b") {
		t.Fatal("another peer refused")
	}

	now = now.Add(10 * time.Second)

	if !l.Allowed("a") {
		t.Fatal("peer not refilled")
	}

	l.Failed("a")

	if l.Allowed("a") {
		t.Fatal("refill gave more than one attempt")
	}

	now = now.Add(time.Hour)

	if !l.Allowed("a") || len(l.peers) != 0 {
		t.Fatalf("full bucket kept: %d peers", len(l.peers))
	}
}

// startTrustd serves a Server from a real folder over real TLS on addr.
func startTrustd(t testing.TB, ca *testCA, addr string, limiter *Limiter) (*Store, string, *observer.ObservedLogs) {
	t.Helper()

	dir := t.TempDir()
	crt, key := ca.serverPair(t, addr)

	if err := WriteFiles(dir, map[string][]byte{
		CACrt: ca.crtPEM, CAKey: ca.keyPEM, TokenFile: []byte(testToken), ServerCrt: crt, ServerKey: key,
	}); err != nil {
		t.Fatal(err)
	}

	for _, name := range Files {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, %v", name, fi.Mode().Perm(), err)
		}
	}

	store, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}

	core, logs := observer.New(zapcore.InfoLevel)
	srv := NewGRPCServer(&Server{Certs: store, Lifetime: time.Hour, Limiter: limiter, Log: zap.New(core)})

	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})

	go func() {
		defer close(done)

		srv.Serve(l)
	}()

	t.Cleanup(func() {
		srv.Stop()
		<-done
	})

	return store, l.Addr().String(), logs
}

func TestClientFailoverAndRefusals(t *testing.T) {
	ca := newTestCA(t)
	_, addr, logs := startTrustd(t, ca, "127.44.3.2", &Limiter{Burst: 100, Refill: time.Second})

	// A closed port first: the client fails over to the live endpoint.
	dead, err := net.Listen("tcp", "127.44.3.3:0")
	if err != nil {
		t.Fatal(err)
	}

	deadAddr := dead.Addr().String()
	dead.Close()

	c := &Client{
		Endpoints:    func() []string { return []string{deadAddr, addr} },
		Token:        testToken,
		Roots:        ca.pool(),
		LocalAddress: "127.44.3.4",
	}

	csr := csrPEM(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "worker"}, IPAddresses: []net.IP{net.ParseIP("127.44.3.4")}})

	signed, err := c.Sign(context.Background(), csr)
	if err != nil {
		t.Fatal(err)
	}

	if signed.Endpoint != addr {
		t.Errorf("signed by %s, want %s", signed.Endpoint, addr)
	}

	if got := c.order([]string{deadAddr, addr}); got[0] != addr {
		t.Errorf("the endpoint that answered is not tried first: %v", got)
	}

	// The peer trustd saw is the node's own address.
	found := false

	for _, e := range logs.FilterMessage("signed certificate").All() {
		if e.ContextMap()["peer"] == "127.44.3.4" {
			found = true
		}
	}

	if !found {
		t.Error("trustd did not log the signing with the node's address as peer")
	}

	// A wrong token is final: no retry loop, PermissionDenied.
	bad := &Client{Endpoints: func() []string { return []string{addr} }, Token: "zzguess-9f8e", Roots: ca.pool()}

	_, err = bad.Sign(context.Background(), csr)
	if status.Code(errorsUnwrap(err)) != codes.PermissionDenied || !Permanent(errorsUnwrap(err)) {
		t.Fatalf("wrong token: %v", err)
	}

	// A CA request is refused with InvalidArgument.
	caCSR := csrPEM(t, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{ext(t, oidBasicConstraints, struct{ IsCA bool }{true})}})

	_, err = c.Sign(context.Background(), caCSR)
	if status.Code(errorsUnwrap(err)) != codes.InvalidArgument {
		t.Fatalf("CA CSR: %v", err)
	}

	// No log line carries a token.
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + toString(v)
		}

		if strings.Contains(line, testToken) || strings.Contains(line, "zzguess-9f8e") {
			t.Errorf("log line carries a token: %s", line)
		}
	}

	// A client without trust in the CA does not talk to trustd at all.
	untrusting := &Client{Endpoints: func() []string { return []string{addr} }, Token: testToken, Roots: newTestCA(t).pool(), MaxBackoff: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	if _, err = untrusting.Sign(ctx, csr); err == nil {
		t.Fatal("signed over an unverified connection")
	}
}

func TestStoreReloadsRotatedCertificate(t *testing.T) {
	ca := newTestCA(t)
	store, addr, _ := startTrustd(t, ca, "127.44.3.5", nil)

	serial := func() *big.Int {
		conn, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool(), ServerName: "127.44.3.5", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()

		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}

	before := serial()

	crt, key := ca.serverPair(t, "127.44.3.5")
	if err := WriteFiles(store.Dir(), map[string][]byte{
		CACrt: ca.crtPEM, CAKey: ca.keyPEM, TokenFile: []byte(testToken), ServerCrt: crt, ServerKey: key,
	}); err != nil {
		t.Fatal(err)
	}

	reloaded, err := store.Reload()
	if err != nil || !reloaded {
		t.Fatalf("reload: %v %v", reloaded, err)
	}

	if after := serial(); after.Cmp(before) == 0 {
		t.Fatal("still serving the old certificate")
	}

	// A broken folder keeps the current bundle.
	if err = os.WriteFile(filepath.Join(store.Dir(), ServerCrt), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err = store.Reload(); err == nil {
		t.Fatal("loaded a broken folder")
	}

	if store.Current() == nil || len(store.Current().Server.Certificate) == 0 {
		t.Fatal("lost the bundle")
	}
}

func TestCertificateWithoutToken(t *testing.T) {
	ca := newTestCA(t)
	store, _, _ := startTrustd(t, ca, "127.44.3.6", nil)
	s := &Server{Certs: store, Log: zap.NewNop()}

	_, err := s.Certificate(context.Background(), &securityapi.CertificateRequest{Csr: csrPEM(t, &x509.CertificateRequest{})})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("no token: %v", err)
	}
}

func errorsUnwrap(err error) error {
	for err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}

		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}

		err = u.Unwrap()
	}

	return err
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}

	return ""
}

// BenchmarkCertificate measures one signing over a kept TLS connection (token check, CSR checks,
// ECDSA signature), as a joining or renewing node causes it.
func BenchmarkCertificate(b *testing.B) {
	ca := newTestCA(b)

	_, addr, _ := startTrustd(b, ca, "127.44.3.7", nil)
	c := &Client{Endpoints: func() []string { return []string{addr} }, Token: testToken, Roots: ca.pool()}
	csr := csrPEM(b, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "worker"}})

	b.ResetTimer()

	for b.Loop() {
		if _, err := c.Sign(context.Background(), csr); err != nil {
			b.Fatal(err)
		}
	}
}
