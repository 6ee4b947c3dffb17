package secrets_test

import (
	"net/netip"
	"testing"

	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

func TestOSRoot(t *testing.T) {
	env := ctest.Start(t, secretsctrl.NewRootController())

	// A control plane: the CA with its key, certSANs split into IPs and names, the token.
	cp := ctest.MachineConfig(t, machine.TypeControlPlane, withCertSANs("10.0.0.50", "api.example.org", "fd00::50"))
	sec := cp.Config().Machine().Security()
	env.Put(cp)

	ctest.AssertResource(env, secrets.OSRootID, func(r *secrets.OSRoot, a *assert.Assertions) {
		spec := r.TypedSpec()
		if !a.NotNil(spec.IssuingCA) {
			return
		}

		a.Equal(sec.IssuingCA().Crt, spec.IssuingCA.Crt)
		a.Equal(sec.IssuingCA().Key, spec.IssuingCA.Key)
		a.NotEmpty(spec.IssuingCA.Key)
		a.Equal([]netip.Addr{netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("fd00::50")}, spec.CertSANIPs)
		a.Equal([]string{"api.example.org"}, spec.CertSANDNSNames)
		a.Equal(sec.Token(), spec.Token)
		a.NotEmpty(spec.Token)
		// As upstream: the issuing CA's certificate is one of the accepted CAs.
		if a.Len(spec.AcceptedCAs, 1) {
			a.Equal(sec.IssuingCA().Crt, spec.AcceptedCAs[0].Crt)
		}
	})

	// machine.acceptedCAs are carried over, empty entries dropped, the issuing CA last.
	other, err := cx509.NewSelfSignedCertificateAuthority()
	require.NoError(t, err)

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = []*cx509.PEMEncodedCertificate{{Crt: other.CrtPEM}, {}}
	}))

	ctest.AssertResource(env, secrets.OSRootID, func(r *secrets.OSRoot, a *assert.Assertions) {
		if a.Len(r.TypedSpec().AcceptedCAs, 2) {
			a.Equal(other.CrtPEM, r.TypedSpec().AcceptedCAs[0].Crt)
			a.Equal(sec.IssuingCA().Crt, r.TypedSpec().AcceptedCAs[1].Crt)
		}

		a.Empty(r.TypedSpec().CertSANIPs, "certSANs removed from the config")
	})

	// A worker: the CA certificate only.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))

	ctest.AssertResource(env, secrets.OSRootID, func(r *secrets.OSRoot, a *assert.Assertions) {
		if a.NotNil(r.TypedSpec().IssuingCA) {
			a.Equal(sec.IssuingCA().Crt, r.TypedSpec().IssuingCA.Crt)
			a.Empty(r.TypedSpec().IssuingCA.Key)
		}

		if a.Len(r.TypedSpec().AcceptedCAs, 1) {
			a.Equal(sec.IssuingCA().Crt, r.TypedSpec().AcceptedCAs[0].Crt)
		}
	})
}
