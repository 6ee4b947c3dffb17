package secrets_test

import (
	"crypto/x509"
	"math/big"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// assertAPI waits for API certificates whose server certificate satisfies cond, and returns
// that certificate.
func assertAPI(env *ctest.Env, cond func(srv *x509.Certificate, a *assert.Assertions)) *x509.Certificate {
	env.T.Helper()

	var srv *x509.Certificate

	ctest.AssertResource(env, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		if !a.NotNil(r.TypedSpec().Server) {
			return
		}

		srv = parseCert(env.T, r.TypedSpec().Server.Crt)
		cond(srv, a)
	})

	return srv
}

func hasIP(ip string) func(*x509.Certificate, *assert.Assertions) {
	return func(c *x509.Certificate, a *assert.Assertions) {
		a.True(slices.ContainsFunc(c.IPAddresses, func(got net.IP) bool { return got.String() == ip }), "%s in %v", ip, c.IPAddresses)
	}
}

func notSerial(n *big.Int) func(*x509.Certificate, *assert.Assertions) {
	return func(c *x509.Certificate, a *assert.Assertions) { a.NotEqual(0, c.SerialNumber.Cmp(n), "not renewed") }
}

// TestAPILocal: a control plane signs its own API certificates, reissues them when its names
// change, and renews them by the wall clock, forward and backward.
func TestAPILocal(t *testing.T) {
	clk := &clock{t: time.Now()}
	env := ctest.Start(t,
		configctrl.NewMachineTypeController(),
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.APIController{Lifetime: 24 * time.Hour, Now: clk.Now, Check: 10 * time.Millisecond},
	)

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane)
	env.Create(append(node("node1", "10.0.0.1"), cfg)...)

	first := assertAPI(env, hasIP("10.0.0.1"))

	require.NoError(t, first.VerifyHostname("node1"), "server certificate lacks the hostname")

	d := first.NotAfter.Sub(first.NotBefore)
	assert.True(t, d > 23*time.Hour && d < 25*time.Hour, "lifetime %v, want a day", d)

	// Both chain to machine.ca; the client one is the node's impersonator identity.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cfg.Config().Machine().Security().IssuingCA().Crt)

	ctest.AssertResource(env, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		client := parseCert(t, r.TypedSpec().Client.Crt)
		a.Equal([]string{"os:impersonator"}, client.Subject.Organization)

		_, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		a.NoError(err)

		_, err = parseCert(t, r.TypedSpec().Server.Crt).Verify(x509.VerifyOptions{Roots: roots, DNSName: "node1"})
		a.NoError(err)

		a.Len(r.TypedSpec().AcceptedCAs, 1)
	})

	// A new address: reissued with it, without the old one.
	ctest.Update(env, network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID), func(r *network.NodeAddress) error {
		r.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}

		return nil
	})

	second := assertAPI(env, func(c *x509.Certificate, a *assert.Assertions) {
		hasIP("10.0.0.2")(c, a)
		a.Len(c.IPAddresses, 1)
	})

	// A newly accepted CA: the bundle grows and the certificates are reissued.
	other, err := cx509.NewSelfSignedCertificateAuthority()
	require.NoError(t, err)

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = []*cx509.PEMEncodedCertificate{{Crt: other.CrtPEM}}
	}))

	ctest.AssertResource(env, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		if a.Len(r.TypedSpec().AcceptedCAs, 2) {
			a.Equal(other.CrtPEM, r.TypedSpec().AcceptedCAs[1].Crt)
		}
	})

	second = assertAPI(env, notSerial(second.SerialNumber))

	// The wall clock jumps 20 hours ahead (past two thirds of the lifetime): renewed.
	clk.Add(20 * time.Hour)

	third := assertAPI(env, notSerial(second.SerialNumber))
	assert.True(t, third.NotBefore.After(second.NotBefore.Add(19*time.Hour)), "renewed certificate starts at %v", third.NotBefore)

	// The clock jumps back before the certificate's start: renewed again.
	clk.Add(-48 * time.Hour)
	assertAPI(env, notSerial(third.SerialNumber))
}

// TestAPIFromTrustd: a worker holds no CA key; it gets its API certificates signed by the real
// trustd of a control plane, found at the control-plane endpoint.
func TestAPIFromTrustd(t *testing.T) {
	cpAddr, workerAddr := testAddr(1), testAddr(2)
	trustdDir := filepath.Join(t.TempDir(), "trustd")

	// The control plane's side: its trustd folder, then trustd serving from it.
	cp := ctest.Start(t,
		configctrl.NewMachineTypeController(),
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.TrustdController{},
		&secretsctrl.TrustdFilesController{Dir: trustdDir},
	)
	cp.Create(append(node("cp1", cpAddr), ctest.MachineConfig(t, machine.TypeControlPlane, withEndpoint(cpAddr)))...)
	cp.WaitFile(filepath.Join(trustdDir, "server.crt"))
	ctest.ServeTrustd(t, trustdDir, cpAddr)

	// The worker's side.
	worker := ctest.Start(t,
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.APIController{Address: workerAddr},
	)
	workerCfg := ctest.MachineConfig(t, machine.TypeWorker, withEndpoint(cpAddr))
	worker.Create(append(node("worker1", workerAddr), workerCfg)...)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(workerCfg.Config().Machine().Security().IssuingCA().Crt)

	ctest.AssertResource(worker, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		srv := parseCert(t, r.TypedSpec().Server.Crt)

		_, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: workerAddr})
		a.NoError(err, "server certificate")
		a.NoError(srv.VerifyHostname("worker1"))

		// trustd signs server certificates only: the token buys no client certificate, no role.
		a.Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, srv.ExtKeyUsage)
		a.Empty(srv.Subject.Organization)
		a.Nil(r.TypedSpec().Client, "a worker must hold no client certificate")
	})
}

// TestAPIFromDiscoveredTrustd: when the control-plane endpoint does not answer, a worker asks
// the control planes that discovery found.
func TestAPIFromDiscoveredTrustd(t *testing.T) {
	cpAddr, workerAddr := testAddr(3), testAddr(4)
	trustdDir := filepath.Join(t.TempDir(), "trustd")

	cp := ctest.Start(t,
		configctrl.NewMachineTypeController(),
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.TrustdController{},
		&secretsctrl.TrustdFilesController{Dir: trustdDir},
	)
	cp.Create(append(node("cp1", cpAddr), ctest.MachineConfig(t, machine.TypeControlPlane))...)
	cp.WaitFile(filepath.Join(trustdDir, "server.crt"))
	ctest.ServeTrustd(t, trustdDir, cpAddr)

	// The worker's config names an endpoint where no trustd listens; its members list cp1.
	worker := ctest.Start(t,
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.APIController{Address: workerAddr},
	)

	member := cluster.NewMember(cluster.NamespaceName, "cp1")
	member.TypedSpec().MachineType = machine.TypeControlPlane
	member.TypedSpec().Addresses = []netip.Addr{netip.MustParseAddr(cpAddr)}

	worker.Create(append(node("worker1", workerAddr), member, ctest.MachineConfig(t, machine.TypeWorker))...)

	ctest.AssertResource(worker, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		if a.NotNil(r.TypedSpec().Server) {
			a.NoError(parseCert(t, r.TypedSpec().Server.Crt).VerifyHostname(workerAddr))
		}
	})
}
