package cri_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/cri"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// A mirror behind TLS and basic auth, configured by its endpoint's host:port as upstream's:
// the mirror's hosts.toml trusts the endpoint's CA, and the credentials reach CRI's config
// (registry.configs."host:port".auth) through the part merged at containerd's start, 0600.
func TestRegistryAuthAndMirrorTLS(t *testing.T) {
	hostsDir, partsDir := t.TempDir(), t.TempDir()

	regs := &v1alpha1.RegistriesConfig{
		RegistryMirrors: map[string]*v1alpha1.RegistryMirrorConfig{
			"private.e2e.test": {MirrorEndpoints: []string{"https://10.5.0.1:5443"}},
			"only.e2e.test":    {MirrorEndpoints: []string{"https://10.5.0.1:5443"}, MirrorSkipFallback: new(true)},
		},
		RegistryConfig: map[string]*v1alpha1.RegistryConfig{
			"10.5.0.1:5443": {
				RegistryTLS:  &v1alpha1.RegistryTLSConfig{TLSCA: v1alpha1.Base64Bytes("CA PEM")},
				RegistryAuth: &v1alpha1.RegistryAuthConfig{RegistryUsername: "u", RegistryPassword: `p"w\`},
			},
			"ghcr.io":       {RegistryAuth: &v1alpha1.RegistryAuthConfig{RegistryIdentityToken: "tok"}},
			"quay.io":       {RegistryAuth: &v1alpha1.RegistryAuthConfig{RegistryAuth: "dTpw"}},
			"empty.example": {RegistryAuth: &v1alpha1.RegistryAuthConfig{}},
		},
	}

	require.NoError(t, cri.WriteHosts(hostsDir, regs))

	hosts, err := os.ReadFile(filepath.Join(hostsDir, "private.e2e.test", "hosts.toml"))
	require.NoError(t, err)
	require.Equal(t, `server = "https://private.e2e.test"

[host."https://10.5.0.1:5443"]
  capabilities = ["pull", "resolve"]
  ca = "`+hostsDir+`/private.e2e.test/10.5.0.1_5443-ca.crt"
`, string(hosts))

	// skipFallback: the mirror is the server, with its own TLS settings.
	hosts, err = os.ReadFile(filepath.Join(hostsDir, "only.e2e.test", "hosts.toml"))
	require.NoError(t, err)
	require.Equal(t, `server = "https://10.5.0.1:5443"
ca = "`+hostsDir+`/only.e2e.test/10.5.0.1_5443-ca.crt"
`, string(hosts))

	ca, err := os.ReadFile(filepath.Join(hostsDir, "private.e2e.test", "10.5.0.1_5443-ca.crt"))
	require.NoError(t, err)
	require.Equal(t, "CA PEM", string(ca))

	require.NoError(t, cri.WriteAuthPart(partsDir, regs))

	st, err := os.Stat(filepath.Join(partsDir, cri.AuthPartName))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// The part merges into containerd's config as CRI reads it.
	merged, err := userfiles.MergeCRIParts("version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = \"/x\"\n", partsDir)
	require.NoError(t, err)

	var cfg struct {
		Plugins map[string]struct {
			Registry struct {
				ConfigPath string `toml:"config_path"`
				Configs    map[string]struct {
					Auth map[string]string `toml:"auth"`
				} `toml:"configs"`
			} `toml:"registry"`
		} `toml:"plugins"`
	}

	require.NoError(t, toml.Unmarshal([]byte(merged), &cfg))

	reg := cfg.Plugins["io.containerd.cri.v1.images"].Registry
	require.Equal(t, "/x", reg.ConfigPath)
	require.Equal(t, map[string]string{"username": "u", "password": `p"w\`}, reg.Configs["10.5.0.1:5443"].Auth)
	require.Equal(t, map[string]string{"identitytoken": "tok"}, reg.Configs["ghcr.io"].Auth)
	require.Equal(t, map[string]string{"auth": "dTpw"}, reg.Configs["quay.io"].Auth)
	require.NotContains(t, reg.Configs, "empty.example")

	// Credentials gone from the config: the part goes too.
	require.NoError(t, cri.WriteAuthPart(partsDir, &v1alpha1.RegistriesConfig{}))
	require.NoFileExists(t, filepath.Join(partsDir, cri.AuthPartName))

	part, err := cri.AuthPart(nil)
	require.NoError(t, err)
	require.True(t, strings.TrimSpace(part) == "")
}
