package secrets_test

import (
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestKubernetesSecrets: a control plane gets its Kubernetes root from the config, the API
// server's certificates with upstream's names, kubeconfigs for its components and the admin,
// and the files, private; a clock jump renews the certificates.
func TestKubernetesSecrets(t *testing.T) {
	clk := &clock{t: time.Now()}
	dir := t.TempDir()
	secretsDir, kubeletDir := filepath.Join(dir, "secrets"), filepath.Join(dir, "etc")

	env := ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubernetesCertSANsController(),
		secretsctrl.NewKubeletController(),
		&secretsctrl.KubernetesDynamicCertsController{Lifetime: 24 * time.Hour, Now: clk.Now, Check: 10 * time.Millisecond},
		&secretsctrl.KubernetesController{Lifetime: 24 * time.Hour, Now: clk.Now, Check: 10 * time.Millisecond},
		&secretsctrl.KubernetesFilesController{SecretsDir: secretsDir, KubeletDir: kubeletDir},
		k8sctrl.NewNodeIPConfigController(),
	)

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane, withEndpoint("k8s.example.org"), func(c *v1alpha1.Config) {
		c.ClusterConfig.APIServerConfig.CertSANs = []string{"10.9.9.9", "api.example.org"}
	})
	env.Create(append(node("cp1", "10.0.0.1", "10.244.0.1"), cfg)...) // 10.244.0.1: the CNI bridge, in the pod network

	cluster := cfg.Config().Cluster()

	ctest.AssertResource(env, secrets.KubernetesRootID, func(r *secrets.KubernetesRoot, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Equal("https://k8s.example.org:6443", s.Endpoint.String())
		a.Equal("https://localhost:6443", s.LocalEndpoint.String())
		a.Equal("cluster.local", s.DNSDomain)
		a.Equal("10.96.0.1", s.APIServerIPs[0].String())
		a.Equal(cluster.IssuingCA().Key, s.IssuingCA.Key)
		a.Equal(cluster.Token().Secret(), s.BootstrapTokenSecret)
		a.Equal(cluster.ServiceAccount().Key, s.ServiceAccount.Key)
	})

	ctest.AssertResource(env, secrets.KubeletID, func(r *secrets.Kubelet, a *assert.Assertions) {
		a.Equal("https://k8s.example.org:6443", r.TypedSpec().Endpoint.String())
		a.Equal(cluster.Token().ID(), r.TypedSpec().BootstrapTokenID)
		a.Len(r.TypedSpec().AcceptedCAs, 1)
	})

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cluster.IssuingCA().Crt)

	var first *x509.Certificate

	ctest.AssertResource(env, secrets.KubernetesDynamicCertsID, func(r *secrets.KubernetesDynamicCerts, a *assert.Assertions) {
		srv := parseCert(t, r.TypedSpec().APIServer.Crt)
		first = srv

		for _, name := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", "k8s.example.org", "api.example.org", "cp1"} {
			_, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
			a.NoError(err, name)
		}

		a.Error(srv.VerifyHostname("10.244.0.1"), "an address in the pod network is not a SAN")

		for _, ip := range []string{"10.96.0.1", "127.0.0.1", "10.0.0.1", "10.9.9.9"} {
			a.NoError(srv.VerifyHostname(ip), ip)
		}

		kc := parseCert(t, r.TypedSpec().APIServerKubeletClient.Crt)
		a.Equal([]string{"system:masters"}, kc.Subject.Organization)

		agg := x509.NewCertPool()
		agg.AppendCertsFromPEM(cluster.AggregatorCA().Crt)

		_, err := parseCert(t, r.TypedSpec().FrontProxy.Crt).Verify(x509.VerifyOptions{Roots: agg, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		a.NoError(err, "front proxy signed by the aggregator CA")
	})

	ctest.AssertResource(env, secrets.KubernetesID, func(r *secrets.Kubernetes, a *assert.Assertions) {
		s := r.TypedSpec()
		a.Contains(s.AdminKubeconfig, "server: https://k8s.example.org:6443")
		a.Contains(s.LocalhostAdminKubeconfig, "server: https://localhost:6443")
		a.Contains(s.SchedulerKubeconfig, "system:kube-scheduler@")
		a.Contains(s.ControllerManagerKubeconfig, "system:kube-controller-manager@")

		var kc struct {
			Users []struct {
				User struct {
					Cert string `yaml:"client-certificate-data"` // base64, as kubectl reads it
				} `yaml:"user"`
			} `yaml:"users"`
		}

		a.NoError(yaml.Unmarshal([]byte(s.AdminKubeconfig), &kc))

		if a.Len(kc.Users, 1) {
			pemBytes, err := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
			a.NoError(err)

			admin := parseCert(t, pemBytes)
			a.Equal([]string{"system:masters"}, admin.Subject.Organization)
			a.InDelta(float64(365*24*time.Hour), float64(admin.NotAfter.Sub(admin.NotBefore)), float64(2*time.Hour))
		}
	})

	// The files, private.
	apiserverKey := filepath.Join(secretsDir, "kube-apiserver", "apiserver.key")
	env.WaitFile(filepath.Join(secretsDir, "kube-scheduler", "kubeconfig"))
	env.WaitFile(filepath.Join(kubeletDir, "pki", "ca.crt"))

	for _, p := range []string{apiserverKey, filepath.Join(secretsDir, "kube-apiserver", "etcd-client.key"), filepath.Join(secretsDir, "kube-controller-manager", "ca.key"), filepath.Join(kubeletDir, "bootstrap-kubeconfig")} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), p)
	}

	st, err := os.Stat(filepath.Join(secretsDir, "kube-apiserver"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	bootstrap, err := os.ReadFile(filepath.Join(kubeletDir, "bootstrap-kubeconfig"))
	require.NoError(t, err)
	assert.Contains(t, string(bootstrap), "token: "+cluster.Token().ID()+"."+cluster.Token().Secret())

	enc, err := os.ReadFile(filepath.Join(secretsDir, "kube-apiserver", "encryptionconfig.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(enc), cluster.SecretboxEncryptionSecret())

	etcdRoots := x509.NewCertPool()
	etcdRoots.AppendCertsFromPEM(cluster.Etcd().CA().Crt)
	etcdClient, err := os.ReadFile(filepath.Join(secretsDir, "kube-apiserver", "etcd-client.crt"))
	require.NoError(t, err)
	_, err = parseCert(t, etcdClient).Verify(x509.VerifyOptions{Roots: etcdRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "etcd client certificate signed by cluster.etcd.ca")

	// 20 hours later: renewed, and the files follow.
	before, err := os.ReadFile(apiserverKey)
	require.NoError(t, err)

	clk.Add(20 * time.Hour)

	ctest.AssertResource(env, secrets.KubernetesDynamicCertsID, func(r *secrets.KubernetesDynamicCerts, a *assert.Assertions) {
		a.NotEqual(0, parseCert(t, r.TypedSpec().APIServer.Crt).SerialNumber.Cmp(first.SerialNumber), "not renewed")
	})

	require.Eventually(t, func() bool {
		after, err := os.ReadFile(apiserverKey)

		return err == nil && !strings.EqualFold(string(after), string(before))
	}, 10*time.Second, 20*time.Millisecond, "apiserver.key not rewritten")
}

// TestKubernetesRootWorker: a worker holds no Kubernetes root and no control-plane secrets,
// only kubelet's bootstrap kubeconfig and CA.
func TestKubernetesRootWorker(t *testing.T) {
	dir := t.TempDir()
	secretsDir, kubeletDir := filepath.Join(dir, "secrets"), filepath.Join(dir, "etc")

	env := ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubeletController(),
		&secretsctrl.KubernetesFilesController{SecretsDir: secretsDir, KubeletDir: kubeletDir},
	)
	cfg := ctest.MachineConfig(t, machine.TypeWorker)
	env.Create(cfg)

	ctest.AssertResource(env, secrets.KubeletID, func(r *secrets.Kubelet, a *assert.Assertions) {
		a.Equal(cfg.Config().Cluster().Token().Secret(), r.TypedSpec().BootstrapTokenSecret)
	})
	ctest.AssertNoResource[*secrets.KubernetesRoot](env, secrets.KubernetesRootID)

	env.WaitFile(filepath.Join(kubeletDir, "pki", "ca.crt"))

	ca, err := os.ReadFile(filepath.Join(kubeletDir, "pki", "ca.crt"))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(cfg.Config().Cluster().IssuingCA().Crt)), strings.TrimSpace(string(ca)))

	_, err = os.Stat(secretsDir)
	assert.True(t, os.IsNotExist(err), "a worker has no control-plane secrets folder")
}
