package cri_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/cri"
)

func TestRegistryHosts(t *testing.T) {
	dir := t.TempDir()

	regs := &v1alpha1.RegistriesConfig{
		RegistryMirrors: map[string]*v1alpha1.RegistryMirrorConfig{
			"docker.io": {MirrorEndpoints: []string{"http://10.5.0.1:5000", "https://mirror.example"}},
			"ghcr.io":   {MirrorEndpoints: []string{"https://a.example/ghcr", "https://b.example"}, MirrorOverridePath: new(true), MirrorSkipFallback: new(true)},
			"*":         {MirrorEndpoints: []string{"https://catch.example"}},
		},
		RegistryConfig: map[string]*v1alpha1.RegistryConfig{
			"docker.io": {RegistryTLS: &v1alpha1.RegistryTLSConfig{
				TLSInsecureSkipVerify: new(true),
				TLSCA:                 v1alpha1.Base64Bytes("CA PEM"),
				TLSClientIdentity:     &x509.PEMEncodedCertificateAndKey{Crt: []byte("CRT"), Key: []byte("KEY")},
			}},
		},
	}

	// A folder of an earlier config, gone from this one, is removed.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "old.example"), 0o755))
	require.NoError(t, cri.WriteHosts(dir, regs))

	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)

		return string(data)
	}

	require.Equal(t, `server = "https://registry-1.docker.io"
skip_verify = true
ca = "`+dir+`/docker.io/ca.crt"
client = [["`+dir+`/docker.io/client.crt", "`+dir+`/docker.io/client.key"]]

[host."http://10.5.0.1:5000"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
  ca = "`+dir+`/docker.io/ca.crt"
  client = [["`+dir+`/docker.io/client.crt", "`+dir+`/docker.io/client.key"]]

[host."https://mirror.example"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
  ca = "`+dir+`/docker.io/ca.crt"
  client = [["`+dir+`/docker.io/client.crt", "`+dir+`/docker.io/client.key"]]
`, read("docker.io/hosts.toml"))
	require.Equal(t, "CA PEM", read("docker.io/ca.crt"))

	st, err := os.Stat(filepath.Join(dir, "docker.io", "client.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// skipFallback: the last mirror stands for the registry, so ghcr.io itself is never asked.
	require.Equal(t, `server = "https://b.example"

[host."https://a.example/ghcr"]
  capabilities = ["pull", "resolve"]
  override_path = true
`, read("ghcr.io/hosts.toml"))
	require.Equal(t, "\n[host.\"https://catch.example\"]\n  capabilities = [\"pull\", \"resolve\"]\n", read("_default/hosts.toml"))
	require.NoDirExists(t, filepath.Join(dir, "old.example"))

	// No registries left: the folder is emptied.
	require.NoError(t, cri.WriteHosts(dir, &v1alpha1.RegistriesConfig{}))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
