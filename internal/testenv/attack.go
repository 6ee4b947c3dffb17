package testenv

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/pki"
)

// Credential is a certificate with its private key, found somewhere an attacker could read.
type Credential struct {
	Source string // where it was found
	Cert   tls.Certificate
}

// maxScanned bounds the files FindCredentials reads: keys and configs are small; images,
// databases and logs are not where keys live.
const maxScanned = 1 << 20

// base64Run is a run of base64 long enough to hold a PEM block (a machine config holds its
// certificates and keys base64-encoded).
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{100,}={0,2}`)

// FindCredentials walks dir and returns every certificate whose private key is also in dir:
// PEM files, and PEM blocks base64-encoded inside files (machine configs). Each is what an
// attacker holding the folder could present as a client certificate.
func FindCredentials(t testing.TB, dir string) []Credential {
	t.Helper()

	type found struct {
		source string
		der    []byte
	}

	var certs, keys []found

	scan := func(source string, data []byte) {
		for rest := data; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				return
			}

			switch {
			case block.Type == "CERTIFICATE":
				certs = append(certs, found{source, block.Bytes})
			case strings.HasSuffix(block.Type, "PRIVATE KEY"):
				keys = append(keys, found{source, block.Bytes})
			}
		}
	}

	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil //nolint:nilerr // an unreadable entry holds nothing to steal
		}

		if fi, err := d.Info(); err != nil || fi.Size() > maxScanned {
			return nil //nolint:nilerr // as above
		}

		data, err := os.ReadFile(path)
		if err != nil {
			return nil //nolint:nilerr // as above
		}

		scan(path, data)

		for _, run := range base64Run.FindAll(data, -1) {
			if dec, err := base64.StdEncoding.DecodeString(string(run)); err == nil && bytes.Contains(dec, []byte("-----BEGIN")) {
				scan(path+" (base64)", dec)
			}
		}

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var out []Credential

	for _, c := range certs {
		crt, err := x509.ParseCertificate(c.der)
		if err != nil {
			continue
		}

		pub, ok := crt.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
		if !ok {
			continue
		}

		for _, k := range keys {
			key := parseKey(k.der)
			if key == nil || !pub.Equal(key.Public()) {
				continue
			}

			out = append(out, Credential{
				Source: fmt.Sprintf("%s (CN=%q O=%q)", c.source, crt.Subject.CommonName, crt.Subject.Organization),
				Cert:   tls.Certificate{Certificate: [][]byte{c.der}, PrivateKey: key, Leaf: crt},
			})

			break
		}
	}

	return out
}

func parseKey(der []byte) crypto.Signer {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s
		}
	}

	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k
	}

	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k
	}

	return nil
}

// TrustdCredential plays a joining node holding only the join token: it asks trustd at addr for
// client certificates carrying roles (refused, or the test fails), then for the server
// certificate a node gets, and returns that one to be tried as a client certificate.
func TrustdCredential(t testing.TB, addr, token string, roots *x509.CertPool) Credential {
	t.Helper()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}

	defer conn.Close()

	ctx := metadata.AppendToOutgoingContext(Context(t, time.Minute), "token", token)
	sign := func(l pki.Leaf) ([]byte, []byte, error) {
		csr, key, err := pki.NewCSR(l)
		if err != nil {
			t.Fatal(err)
		}

		resp, err := securityapi.NewSecurityServiceClient(conn).Certificate(ctx, &securityapi.CertificateRequest{Csr: csr})

		return resp.GetCrt(), key, err
	}

	for _, l := range []pki.Leaf{
		{CommonName: "attacker", Organizations: []string{"os:admin"}},
		{CommonName: "attacker", Organizations: []string{"os:impersonator"}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{CommonName: "attacker", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		if _, _, err := sign(l); status.Code(err) != codes.InvalidArgument {
			t.Errorf("trustd with the join token, CSR O=%v usages %v: got %v, want InvalidArgument (refused)", l.Organizations, l.ExtKeyUsages, err)
		}
	}

	crtPEM, keyPEM, err := sign(pki.Leaf{CommonName: "attacker", IPs: []net.IP{net.ParseIP("10.99.0.1")}})
	if err != nil {
		t.Fatalf("trustd refused a node's server certificate request: %v", err)
	}

	cert, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	return Credential{Source: "trustd, for the join token", Cert: cert}
}

// attackRoles are the role sets a stolen certificate asserts in metadata: each, and none.
var attackRoles = [][]string{nil, {"os:reader"}, {"os:operator"}, {"os:etcd:backup"}, {"os:admin"}, {"os:impersonator"}, {"os:admin", "os:impersonator"}}

// handshakeRefusals are what a client sees when apid's TLS 1.3 handshake refuses its
// certificate: the alert, or the connection closed under its first write.
var handshakeRefusals = []string{"tls:", "certificate", "broken pipe", "connection reset", "EOF"}

// refused reports whether a call reached nothing: apid refused the caller, or the TLS
// handshake refused its certificate (a node that is merely down is not a refusal).
func refused(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	case codes.Unavailable:
		msg := status.Convert(err).Message()

		return slices.ContainsFunc(handshakeRefusals, func(s string) bool { return strings.Contains(msg, s) })
	}

	return false
}

// apiClient dials apid at endpoint presenting cert (none when empty).
func apiClient(t testing.TB, endpoint string, cert tls.Certificate, roots *x509.CertPool) (machine.MachineServiceClient, func()) {
	t.Helper()

	conn, err := grpc.NewClient(net.JoinHostPort(endpoint, fmt.Sprint(constants.ApidPort)), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, MinVersion: tls.VersionTLS13, ServerName: endpoint,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
	})))
	if err != nil {
		t.Fatal(err)
	}

	return machine.NewMachineServiceClient(conn), func() { conn.Close() }
}

// AdminCredential is the client certificate of the talosconfig's current context, with the
// CA it trusts.
func AdminCredential(t testing.TB, talosconfig string) (Credential, *x509.CertPool) {
	t.Helper()

	cfg, err := clientconfig.Open(talosconfig)
	if err != nil {
		t.Fatal(err)
	}

	ctx := cfg.Contexts[cfg.Context]
	if ctx == nil {
		t.Fatalf("%s: no current context", talosconfig)
	}

	decode := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("%s: %v", talosconfig, err)
		}

		return b
	}

	cert, err := tls.X509KeyPair(decode(ctx.Crt), decode(ctx.Key))
	if err != nil {
		t.Fatal(err)
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(decode(ctx.CA))

	return Credential{Source: "talosconfig " + cfg.Context, Cert: cert}, roots
}

// AttackAPI presents each credential (and none) as a client certificate to every endpoint's
// apid, asserting every role in metadata, for the endpoint itself and routed to each node, and
// fails the test for any call that is not refused. admin is the control: it must be answered
// by every endpoint, so a refusal is the certificate's, not a node that is down. It returns
// how many calls were refused.
func AttackAPI(t testing.TB, admin Credential, creds []Credential, roots *x509.CertPool, endpoints, nodes []string) int {
	t.Helper()

	for _, ep := range endpoints {
		api, done := apiClient(t, ep, admin.Cert, roots)

		// A node an earlier test rebooted may still be on its way back.
		WaitFor(t, "the control: "+admin.Source+" answered by "+ep, 3*time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			_, err := api.Version(ctx, &emptypb.Empty{})

			return err
		})

		done()
	}

	tried := 0

	for _, c := range append([]Credential{{Source: "no client certificate"}}, creds...) {
		for _, ep := range endpoints {
			api, done := apiClient(t, ep, c.Cert, roots)

			for _, target := range append([]string{""}, nodes...) {
				for _, roles := range attackRoles {
					md := metadata.MD{}
					if target != "" {
						md.Set("node", target)
					}

					for _, r := range roles {
						md.Append(constants.APIAuthzRoleMetadataKey, r)
					}

					ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 20*time.Second)

					_, err := api.Version(ctx, &emptypb.Empty{})
					tried++

					if !refused(err) {
						t.Errorf("%s via %s to node %q asserting %v: Version answered %v, want refused", c.Source, ep, target, roles, err)
					}

					_, err = api.GenerateClientConfiguration(ctx, &machine.GenerateClientConfigurationRequest{Roles: []string{"os:admin"}})
					tried++

					if !refused(err) {
						t.Errorf("%s via %s to node %q asserting %v: GenerateClientConfiguration answered %v, want refused", c.Source, ep, target, roles, err)
					}

					cancel()
				}
			}

			done()
		}
	}

	return tried
}

// WorkerTakeover is the attack of someone holding a worker: its join token and every file of
// its config and state folders. Each certificate with its key found there, and the one trustd
// signs for the token, is tried against every node's apid asserting every role, directly and
// routed to every node; all must be refused. talosconfig is the admin's, the control.
func WorkerTakeover(t testing.TB, talosconfig, workerConfig, trustdAddr string, endpoints, nodes []string, workerFiles ...string) {
	t.Helper()

	admin, roots := AdminCredential(t, talosconfig)

	data, err := os.ReadFile(workerConfig)
	if err != nil {
		t.Fatal(err)
	}

	var cfg struct {
		Machine struct {
			Token string `yaml:"token"`
		} `yaml:"machine"`
	}

	if err = yaml.Unmarshal(data, &cfg); err != nil || cfg.Machine.Token == "" {
		t.Fatalf("%s: no machine.token (%v)", workerConfig, err)
	}

	creds := FindCredentials(t, workerConfig)
	for _, dir := range workerFiles {
		creds = append(creds, FindCredentials(t, dir)...)
	}

	for _, c := range creds {
		t.Logf("found in the worker's files: %s", c.Source)
	}

	creds = append(creds, TrustdCredential(t, trustdAddr, cfg.Machine.Token, roots))

	n := AttackAPI(t, admin, creds, roots, endpoints, nodes)
	t.Logf("%d certificates (and none) tried: %d calls to %d endpoints, all refused", len(creds), n, len(endpoints))
}
