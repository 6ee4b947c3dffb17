package secrets_test

import (
	"crypto/x509"
	"net/netip"
	"testing"

	"github.com/cosi-project/runtime/pkg/controller"
	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

// startSigner runs the controllers a control plane needs to issue trustd's certificate.
func startSigner(t *testing.T, extra ...controller.Controller) *ctest.Env {
	t.Helper()

	return ctest.Start(t, append([]controller.Controller{
		configctrl.NewMachineTypeController(),
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.TrustdController{},
	}, extra...)...)
}

func TestTrustd(t *testing.T) {
	env := startSigner(t)

	cp := ctest.MachineConfig(t, machine.TypeControlPlane)
	env.Create(append(node("cp1", "10.0.0.1"), cp)...)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.Config().Machine().Security().IssuingCA().Crt)

	// Served to workers that dial the control-plane endpoint, and to those that dial the node.
	var first *x509.Certificate

	ctest.AssertResource(env, secrets.TrustdID, func(r *secrets.Trustd, a *assert.Assertions) {
		if !a.NotNil(r.TypedSpec().Server) {
			return
		}

		first = parseCert(t, r.TypedSpec().Server.Crt)

		for _, name := range []string{ctest.EndpointHost, "10.0.0.1", "cp1"} {
			_, err := first.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
			a.NoError(err, name)
		}

		a.Len(r.TypedSpec().AcceptedCAs, 1)
	})

	// A newly accepted CA: reissued with the bigger bundle.
	other, err := cx509.NewSelfSignedCertificateAuthority()
	require.NoError(t, err)

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = []*cx509.PEMEncodedCertificate{{Crt: other.CrtPEM}}
	}))

	ctest.AssertResource(env, secrets.TrustdID, func(r *secrets.Trustd, a *assert.Assertions) {
		if a.Len(r.TypedSpec().AcceptedCAs, 2) {
			a.Equal(other.CrtPEM, r.TypedSpec().AcceptedCAs[1].Crt)
		}

		a.NotEqual(0, parseCert(t, r.TypedSpec().Server.Crt).SerialNumber.Cmp(first.SerialNumber), "not reissued")
	})

	// No longer a control plane: no trustd certificate.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	ctest.AssertNoResource[*secrets.Trustd](env, secrets.TrustdID)
}

// TestTrustdFollowsNames: a new node name or address reissues trustd's certificate with it.
func TestTrustdFollowsNames(t *testing.T) {
	env := startSigner(t)
	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane))...)

	ctest.AssertResource(env, secrets.TrustdID, func(r *secrets.Trustd, a *assert.Assertions) {
		if a.NotNil(r.TypedSpec().Server) {
			a.NoError(parseCert(t, r.TypedSpec().Server.Crt).VerifyHostname("cp1"))
		}
	})

	ctest.Update(env, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname = "cp2"

		return nil
	})
	ctest.Update(env, network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID), func(r *network.NodeAddress) error {
		r.TypedSpec().Addresses = append(r.TypedSpec().Addresses, netip.MustParsePrefix("10.0.0.9/32"))

		return nil
	})

	ctest.AssertResource(env, secrets.TrustdID, func(r *secrets.Trustd, a *assert.Assertions) {
		crt := parseCert(t, r.TypedSpec().Server.Crt)
		a.NoError(crt.VerifyHostname("cp2"))
		a.NoError(crt.VerifyHostname("10.0.0.9"))
		a.NoError(crt.VerifyHostname("10.0.0.1"))
		a.Error(crt.VerifyHostname("cp1"), "the old name stays")
	})
}
