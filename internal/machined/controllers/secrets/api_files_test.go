package secrets_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/apid/certs"
	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

func TestAPIFilesContent(t *testing.T) {
	pair := &cx509.PEMEncodedCertificateAndKey{Crt: []byte("crt"), Key: []byte("key")}

	_, err := secretsctrl.APIFiles(&secrets.APICertsSpec{Server: pair})
	require.Error(t, err, "incomplete certificates must not be written")

	files, err := secretsctrl.APIFiles(&secrets.APICertsSpec{
		AcceptedCAs: []*cx509.PEMEncodedCertificate{{Crt: []byte("ca1\n\n")}, {Crt: []byte("ca2")}},
		Server:      pair,
		Client:      &cx509.PEMEncodedCertificateAndKey{Crt: []byte("client crt"), Key: []byte("client key")},
	})
	require.NoError(t, err)

	assert.Equal(t, map[string][]byte{
		certs.CA:        []byte("ca1\nca2\n"),
		certs.ServerCrt: []byte("crt"),
		certs.ServerKey: []byte("key"),
		certs.ClientCrt: []byte("client crt"),
		certs.ClientKey: []byte("client key"),
	}, files)
}

// TestAPIFiles: apid's folder follows the API resource: every file 0600, loadable by apid, and
// replaced when the certificates are.
func TestAPIFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "apid")
	env := ctest.Start(t,
		configctrl.NewMachineTypeController(),
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.APIController{},
		&secretsctrl.APIFilesController{Dir: dir},
	)
	env.Create(append(node("node1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane))...)

	env.WaitFile(filepath.Join(dir, certs.ClientKey))

	// The files are those of the resource (written together, the key last of all).
	api, err := safe.StateGetByID[*secrets.API](env.Ctx, env.State, secrets.APIID)
	require.NoError(t, err)

	want, err := secretsctrl.APIFiles(api.TypedSpec())
	require.NoError(t, err)

	waitFiles(t, env, dir, want)

	for _, name := range certs.All {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), name)
	}

	_, err = certs.Load(dir)
	require.NoError(t, err, "apid cannot load what was written")

	// Reissued certificates reach the folder.
	ctest.Update(env, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname = "node2"

		return nil
	})

	ctest.AssertResource(env, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		a.NoError(parseCert(t, r.TypedSpec().Server.Crt).VerifyHostname("node2"))
	})

	api, err = safe.StateGetByID[*secrets.API](env.Ctx, env.State, secrets.APIID)
	require.NoError(t, err)

	want, err = secretsctrl.APIFiles(api.TypedSpec())
	require.NoError(t, err)

	waitFiles(t, env, dir, want)
}

// waitFiles waits until dir holds exactly the contents of want.
func waitFiles(t *testing.T, env *ctest.Env, dir string, want map[string][]byte) {
	t.Helper()

	for {
		same := true

		for name, data := range want {
			got, err := os.ReadFile(filepath.Join(dir, name))
			same = same && err == nil && bytes.Equal(got, data)
		}

		if same {
			return
		}

		select {
		case <-env.Ctx.Done():
			t.Fatalf("%s does not hold the certificates of the API resource", dir)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
