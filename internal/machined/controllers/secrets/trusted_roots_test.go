package secrets_test

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/security"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/trustbundle"
)

// TestTrustedRootsBundle: the node's bundle is the system's plus a TrustedRootsConfig's CA;
// a client with the bundle's pool trusts a server of that CA, and without the document (the
// config changed) the bundle is the system's again and the server is refused.
func TestTrustedRootsBundle(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()

	dir := t.TempDir()
	system, bundle := filepath.Join(dir, "system.crt"), filepath.Join(dir, "node", "ca-certificates.crt")
	systemPEM := "# the system's bundle stands here\n"
	require.NoError(t, os.WriteFile(system, []byte(systemPEM), 0o644))

	env := ctest.Start(t, &secretsctrl.TrustedRootsController{System: system, Bundle: bundle})

	base := ctest.MachineConfig(t, machine.TypeControlPlane)
	roots := security.NewTrustedRootsConfigV1Alpha1()
	roots.MetaName = "test-ca"
	roots.Certificates = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))

	withRoots, err := container.New(append(base.Provider().Documents(), roots)...)
	require.NoError(t, err)

	cfg := configres.NewMachineConfig(withRoots)
	env.Create(cfg)

	get := func() error {
		pool, err := trustbundle.Pool(bundle)
		if err != nil {
			return err
		}

		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}

		resp, err := c.Get(srv.URL)
		if err != nil {
			return err
		}

		return resp.Body.Close()
	}

	require.Eventually(t, func() bool { return get() == nil }, 10*time.Second, 50*time.Millisecond, "the server of the TrustedRootsConfig's CA is trusted")

	got, err := os.ReadFile(bundle)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), systemPEM), "the system's bundle comes first: %q", got)
	require.Contains(t, string(got), "test-ca:\n", "the document is named in the bundle")

	env.Put(configres.NewMachineConfig(base.Provider()))

	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(bundle) // an unwritten bundle is not yet the system's

		return string(b) == systemPEM
	}, 10*time.Second, 50*time.Millisecond, "without the document the bundle is the system's")

	err = get()
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate", "refused as untrusted")
}
