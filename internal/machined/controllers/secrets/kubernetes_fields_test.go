package secrets_test

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

// TestKubernetesSecretsConfigFields: cluster.aescbcEncryptionSecret is the API server's aescbc
// encryption key (the one that encrypts, when no secretbox key is set); cluster.acceptedCAs are
// trusted beside cluster.ca by the API server (client-ca-file), kubelet and the admin
// kubeconfig; cluster.adminKubeconfig.certLifetime is the admin certificate's lifetime.
func TestKubernetesSecretsConfigFields(t *testing.T) {
	dir := t.TempDir()
	secretsDir, kubeletDir := filepath.Join(dir, "secrets"), filepath.Join(dir, "etc")

	env := ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubernetesCertSANsController(),
		secretsctrl.NewKubeletController(),
		&secretsctrl.KubernetesDynamicCertsController{},
		&secretsctrl.KubernetesController{},
		&secretsctrl.KubernetesFilesController{SecretsDir: secretsDir, KubeletDir: kubeletDir},
		k8sctrl.NewNodeIPConfigController(),
	)

	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)

	aescbc := base64.StdEncoding.EncodeToString(key)

	other, err := cx509.NewSelfSignedCertificateAuthority()
	require.NoError(t, err)

	const adminLifetime = 48 * time.Hour

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.ClusterSecretboxEncryptionSecret = ""
		c.ClusterConfig.ClusterAESCBCEncryptionSecret = aescbc
		c.ClusterConfig.ClusterAcceptedCAs = []*cx509.PEMEncodedCertificate{{Crt: other.CrtPEM}}
		c.ClusterConfig.AdminKubeconfigConfig = &v1alpha1.AdminKubeconfigConfig{AdminKubeconfigCertLifetime: adminLifetime}
	})
	env.Create(append(node("cp1", "10.0.0.1"), cfg)...)

	// The encryption config: aescbc with the config's key encrypts, identity reads the rest.
	encPath := filepath.Join(secretsDir, secretsctrl.APIServerDir, secretsctrl.FileEncryptionConfig)
	env.WaitFile(encPath)

	data, err := os.ReadFile(encPath)
	require.NoError(t, err)

	var enc struct {
		Kind      string `yaml:"kind"`
		Resources []struct {
			Resources []string         `yaml:"resources"`
			Providers []map[string]any `yaml:"providers"`
		} `yaml:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(data, &enc))
	assert.Equal(t, "EncryptionConfiguration", enc.Kind)
	require.Len(t, enc.Resources, 1)
	assert.Equal(t, []string{"secrets"}, enc.Resources[0].Resources)
	require.Len(t, enc.Resources[0].Providers, 2, "aescbc, then identity: %s", data)
	assert.Equal(t, map[string]any{"keys": []any{map[string]any{"name": "key1", "secret": aescbc}}}, enc.Resources[0].Providers[0]["aescbc"])
	assert.Contains(t, enc.Resources[0].Providers[1], "identity")

	// A client certificate signed by the accepted CA passes the API server's client CA bundle
	// and kubelet's; both still hold cluster.ca.
	client, err := cx509.NewKeyPair(other, cx509.CommonName("someone"), cx509.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
	require.NoError(t, err)

	clusterCA := parseCert(t, cfg.Config().Cluster().IssuingCA().Crt)

	for _, bundle := range []string{filepath.Join(secretsDir, secretsctrl.APIServerDir, secretsctrl.FileCA), filepath.Join(kubeletDir, secretsctrl.KubeletCAFile)} {
		env.WaitFile(bundle)

		pemBytes, err := os.ReadFile(bundle)
		require.NoError(t, err)

		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(pemBytes), bundle)

		_, err = parseCert(t, client.CrtPEM).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		assert.NoError(t, err, "%s trusts the accepted CA", bundle)

		_, err = clusterCA.Verify(x509.VerifyOptions{Roots: pool})
		assert.NoError(t, err, "%s still holds cluster.ca", bundle)
	}

	// The admin kubeconfig: its certificate lives certLifetime, its CA data holds both CAs.
	ctest.AssertResource(env, secrets.KubernetesID, func(r *secrets.Kubernetes, a *assert.Assertions) {
		var kc struct {
			Clusters []struct {
				Cluster struct {
					CA string `yaml:"certificate-authority-data"`
				} `yaml:"cluster"`
			} `yaml:"clusters"`
			Users []struct {
				User struct {
					Cert string `yaml:"client-certificate-data"`
				} `yaml:"user"`
			} `yaml:"users"`
		}

		if !a.NoError(yaml.Unmarshal([]byte(r.TypedSpec().AdminKubeconfig), &kc)) || !a.Len(kc.Users, 1) || !a.Len(kc.Clusters, 1) {
			return
		}

		crtPEM, err := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
		a.NoError(err)

		admin := parseCert(t, crtPEM)
		a.InDelta(float64(adminLifetime), float64(admin.NotAfter.Sub(admin.NotBefore)), float64(2*time.Hour), "admin certificate lifetime")

		caPEM, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
		a.NoError(err)

		pool := x509.NewCertPool()
		a.True(pool.AppendCertsFromPEM(caPEM))

		_, err = parseCert(t, other.CrtPEM).Verify(x509.VerifyOptions{Roots: pool})
		a.NoError(err, "the admin kubeconfig trusts the accepted CA")
	})
}
