package secrets_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/trustd"
)

// TestTrustdFiles: a control plane's trustd folder holds the CA with its key, the token and
// trustd's certificate, each 0600, and trustd loads it.
func TestTrustdFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "trustd")
	env := startSigner(t, &secretsctrl.TrustdFilesController{Dir: dir})

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane)
	env.Create(append(node("cp1", "10.0.0.1"), cfg)...)

	env.WaitFile(filepath.Join(dir, trustd.ServerCrt))

	sec := cfg.Config().Machine().Security()

	for name, want := range map[string][]byte{
		trustd.TokenFile: []byte(sec.Token()),
		trustd.CAKey:     sec.IssuingCA().Key,
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), name)
	}

	for _, name := range trustd.Files {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), name)
	}

	b, err := trustd.LoadBundle(dir)
	require.NoError(t, err)

	crt, err := x509.ParseCertificate(b.Server.Certificate[0])
	require.NoError(t, err)

	// Workers dial the control-plane endpoint's host, or the node.
	assert.NoError(t, crt.VerifyHostname(ctest.EndpointHost))
	assert.NoError(t, crt.VerifyHostname("10.0.0.1"))
	assert.Equal(t, parseCert(t, sec.IssuingCA().Crt).Raw, b.CA.Crt.Raw, "trustd signs with machine.ca")
}

// TestTrustdFilesFollowToken: a new machine.token reaches trustd's folder, which trustd reloads.
func TestTrustdFilesFollowToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "trustd")
	env := startSigner(t, &secretsctrl.TrustdFilesController{Dir: dir})
	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane))...)
	env.WaitFile(filepath.Join(dir, trustd.TokenFile))

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineToken = "abcdef.0123456789abcdef"
	}))

	for {
		if got, err := os.ReadFile(filepath.Join(dir, trustd.TokenFile)); err == nil && string(got) == "abcdef.0123456789abcdef" {
			break
		}

		select {
		case <-env.Ctx.Done():
			t.Fatal("the new token never reached trustd's folder")
		case <-time.After(10 * time.Millisecond):
		}
	}

	b, err := trustd.LoadBundle(dir)
	require.NoError(t, err)
	assert.Equal(t, "abcdef.0123456789abcdef", string(b.Token))
}
