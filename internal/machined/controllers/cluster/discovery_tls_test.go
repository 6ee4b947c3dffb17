package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/discoveryservice"
	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// startTLSDiscovery runs a discovery service over TLS on loopback, with a certificate for
// 127.0.0.1 that only the returned pool trusts; its endpoint is https://127.0.0.1:<port>/.
func startTLSDiscovery(t *testing.T) (string, *x509.CertPool) {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "discovery"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)

	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)

	pool := x509.NewCertPool()
	pool.AddCert(cert)

	svc, err := discoveryservice.New(discoveryservice.Options{Limits: discoveryservice.Limits{RequestsPerSecond: 1000, Burst: 1000}})
	require.NoError(t, err)

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() {
		done <- svc.Serve(ctx, l, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	}()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	return "https://" + l.Addr().String() + "/", pool
}

// TestDiscoveryServiceTLS: an https endpoint is spoken over TLS, the service's certificate
// checked against the node's trusted roots: nodes that trust it find each other; one that does
// not (the system's roots only) reaches nobody.
func TestDiscoveryServiceTLS(t *testing.T) {
	endpoint, roots := startTLSDiscovery(t)
	trusting := &clusterctrl.DiscoveryServiceController{Roots: func() (*x509.CertPool, error) { return roots, nil }}

	// The node that does not trust the certificate starts first: had it reached the service, the
	// others would list it.
	untrusting := startNode(t)
	untrusting.Create(append(node("tls-c", testAddr(23)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint)))...)

	a := startNodeWith(t, trusting)
	a.Create(append(node("tls-a", testAddr(21)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint)))...)

	b := startNodeWith(t, &clusterctrl.DiscoveryServiceController{Roots: trusting.Roots})
	b.Create(append(node("tls-b", testAddr(22)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint)))...)

	ctest.AssertIDs[*cluster.Member](a, "tls-a", "tls-b")
	ctest.AssertIDs[*cluster.Member](b, "tls-a", "tls-b")
	ctest.AssertResource(a, "tls-b", func(r *cluster.Member, as *assert.Assertions) {
		as.Equal([]netip.Addr{netip.MustParseAddr(testAddr(22))}, r.TypedSpec().Addresses)
	})

	ctest.AssertIDs[*cluster.Member](untrusting, "tls-c")
	ctest.AssertIDs[*cluster.Member](a, "tls-a", "tls-b")
}
