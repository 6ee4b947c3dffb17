package secrets_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

func nodename(name string) *k8s.Nodename {
	n := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	n.TypedSpec().Nodename = name

	return n
}

// startKubeletFiles runs the controllers that write kubelet's files, in temporary folders.
func startKubeletFiles(t *testing.T) (env *ctest.Env, kubeletDir, certDir string) {
	dir := t.TempDir()
	kubeletDir, certDir = filepath.Join(dir, "etc"), filepath.Join(dir, "pki")

	env = ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubeletController(),
		&secretsctrl.KubernetesFilesController{SecretsDir: filepath.Join(dir, "secrets"), KubeletDir: kubeletDir,
			KubeletCertDir: certDir, KubeletCertPath: "/var/lib/kubelet/pki"},
	)

	return env, kubeletDir, certDir
}

// TestKubeletClientControlPlane: a control plane's kubelet gets a client certificate for its
// Node from the cluster CA (system:node:<name> in system:nodes), private, behind the link
// kubelet's own certificate store keeps, and a kubeconfig that uses it.
func TestKubeletClientControlPlane(t *testing.T) {
	env, kubeletDir, certDir := startKubeletFiles(t)

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane, withEndpoint("k8s.example.org"))
	env.Create(append(node("cp1", "10.0.0.1"), cfg, nodename("cp1"))...)

	current := filepath.Join(certDir, secretsctrl.KubeletClientCurrent)
	env.WaitFile(current)

	link, err := os.Readlink(current)
	require.NoError(t, err, "kubelet's store wants the current pair as a link")
	assert.False(t, filepath.IsAbs(link))

	st, err := os.Stat(current)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	pair, err := os.ReadFile(current)
	require.NoError(t, err)

	crt := parseCert(t, pair)
	assert.Equal(t, "system:node:cp1", crt.Subject.CommonName)
	assert.Equal(t, []string{"system:nodes"}, crt.Subject.Organization)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cfg.Config().Cluster().IssuingCA().Crt)
	_, err = crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "signed by the cluster CA for client auth")

	kc, err := os.ReadFile(filepath.Join(kubeletDir, "kubeconfig-kubelet"))
	require.NoError(t, err)
	assert.Contains(t, string(kc), "client-certificate: /var/lib/kubelet/pki/"+secretsctrl.KubeletClientCurrent)
	assert.Contains(t, string(kc), "server: https://k8s.example.org:6443")
}

// TestKubeletClientWorker: a worker has no cluster CA key: its kubelet joins with the bootstrap
// token, and machined writes it no certificate.
func TestKubeletClientWorker(t *testing.T) {
	env, kubeletDir, certDir := startKubeletFiles(t)

	env.Create(ctest.MachineConfig(t, machine.TypeWorker), nodename("w1"))
	env.WaitFile(filepath.Join(kubeletDir, "bootstrap-kubeconfig"))

	_, err := os.Stat(filepath.Join(certDir, secretsctrl.KubeletClientCurrent))
	assert.True(t, os.IsNotExist(err), "a worker's kubelet certificate comes from its bootstrap request")

	_, err = os.Stat(filepath.Join(kubeletDir, "kubeconfig-kubelet"))
	assert.True(t, os.IsNotExist(err))
}
