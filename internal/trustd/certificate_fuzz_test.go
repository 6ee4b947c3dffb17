package trustd

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// FuzzCertificate calls trustd's Certificate with any CSR bytes and either the cluster token
// or any other token. Properties:
//   - without the right token the answer is PermissionDenied, whatever the CSR;
//   - with it, a CSR is either refused (InvalidArgument, with the policy's message) or signed
//     into a node's server certificate: signed by the cluster CA for the CSR's own key, never
//     a CA, no organization (no role), usages digital signature and key encipherment at
//     most, extended usage server authentication only, no URI or email names, valid no
//     longer than trustd's lifetime;
//   - neither the cluster token nor the token sent ever appears in trustd's log.
func FuzzCertificate(f *testing.F) {
	ca := newTestCA(f)
	dir := f.TempDir()
	crt, key := ca.serverPair(f, "127.0.0.1")

	if err := WriteFiles(dir, map[string][]byte{CACrt: ca.crtPEM, CAKey: ca.keyPEM, TokenFile: []byte(testToken), ServerCrt: crt, ServerKey: key}); err != nil {
		f.Fatal(err)
	}

	store, err := NewStore(dir)
	if err != nil {
		f.Fatal(err)
	}

	core, logs := observer.New(zapcore.DebugLevel)
	srv := &Server{Certs: store, Lifetime: time.Hour, Log: zap.New(core)}

	for _, tmpl := range []*x509.CertificateRequest{
		{Subject: pkix.Name{CommonName: "node"}, IPAddresses: []net.IP{net.ParseIP("10.5.0.2")}, DNSNames: []string{"n1"}},
		{Subject: pkix.Name{CommonName: "node", Organization: []string{"os:impersonator"}}},
		{Subject: pkix.Name{CommonName: "node", Organization: []string{"os:admin"}}},
		{Subject: pkix.Name{CommonName: "ca"}, ExtraExtensions: []pkix.Extension{ext(f, oidBasicConstraints, struct{ IsCA bool }{true})}},
		{Subject: pkix.Name{CommonName: "ku"}, ExtraExtensions: []pkix.Extension{ext(f, oidKeyUsage, asn1.BitString{Bytes: []byte{0xa4}, BitLength: 6})}},
		{Subject: pkix.Name{CommonName: "eku"}, ExtraExtensions: []pkix.Extension{ext(f, oidExtKeyUsageForTest, []asn1.ObjectIdentifier{oidServerAuth, oidClientAuth})}},
	} {
		f.Add(csrPEM(f, tmpl), true, "")
	}

	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), true, "")
	f.Add(csrPEM(f, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node"}}), false, "abcdef.0123456789abcdee")

	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 5, 0, 9), Port: 1}})

	f.Fuzz(func(t *testing.T, csr []byte, rightToken bool, token string) {
		if rightToken {
			token = testToken
		}

		logs.TakeAll()

		resp, err := srv.Certificate(metadata.NewIncomingContext(ctx, metadata.Pairs(TokenMetadataKey, token)), &securityapi.CertificateRequest{Csr: csr})

		for _, e := range logs.TakeAll() {
			line := e.Message
			for k, v := range e.ContextMap() {
				line += " " + k + "=" + strings.ReplaceAll(toString(v), "\n", " ")
			}

			if strings.Contains(line, testToken) || (len(token) >= 8 && strings.Contains(line, token)) {
				t.Fatalf("a token is in trustd's log: %s", line)
			}
		}

		if token != testToken {
			if status.Code(err) != codes.PermissionDenied || resp != nil {
				t.Fatalf("token %q: got %v, %v; want PermissionDenied", token, resp, err)
			}

			return
		}

		if err != nil {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), ErrPolicy.Error()) {
				t.Fatalf("a refused CSR must be InvalidArgument with the policy's message: %v", err)
			}

			return
		}

		checkNodeCertificate(t, ca, csr, resp.Crt)
	})
}

var oidExtKeyUsageForTest = asn1.ObjectIdentifier{2, 5, 29, 37}

func checkNodeCertificate(t *testing.T, ca *testCA, csrData, crtPEM []byte) {
	t.Helper()

	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatal("signed certificate is not PEM")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	if err = crt.CheckSignatureFrom(ca.crt); err != nil {
		t.Fatalf("not signed by the cluster CA: %v", err)
	}

	csrBlock, _ := pem.Decode(csrData)
	csr, err := x509.ParseCertificateRequest(csrBlock.Bytes)
	if err != nil {
		t.Fatalf("a CSR that does not parse was signed: %v", err)
	}

	if string(csr.RawSubjectPublicKeyInfo) != string(crt.RawSubjectPublicKeyInfo) {
		t.Fatal("signed a key other than the CSR's")
	}

	if crt.IsCA || crt.BasicConstraintsValid && crt.MaxPathLen > 0 {
		t.Fatal("signed a CA certificate")
	}

	if len(crt.Subject.Organization) > 0 {
		t.Fatalf("signed organizations %q: the join token must buy no role", crt.Subject.Organization)
	}

	if len(crt.Subject.OrganizationalUnit) > 0 || len(crt.URIs) > 0 || len(crt.EmailAddresses) > 0 {
		t.Fatalf("signed OU %v URIs %v emails %v", crt.Subject.OrganizationalUnit, crt.URIs, crt.EmailAddresses)
	}

	if crt.KeyUsage&^(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment) != 0 {
		t.Fatalf("signed key usage %b", crt.KeyUsage)
	}

	if len(crt.ExtKeyUsage) != 1 || crt.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("signed extended usages %v, want server authentication only", crt.ExtKeyUsage)
	}

	if len(crt.UnknownExtKeyUsage) > 0 {
		t.Fatalf("signed extended usages %v", crt.UnknownExtKeyUsage)
	}

	if crt.NotAfter.Sub(crt.NotBefore) > time.Hour+time.Minute {
		t.Fatalf("valid for %v, more than trustd's hour", crt.NotAfter.Sub(crt.NotBefore))
	}
}
