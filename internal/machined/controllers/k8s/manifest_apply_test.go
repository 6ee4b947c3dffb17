package k8s_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/testenv"
)

// kubeBinary finds a kube-apiserver binary ($KUBE_BIN_DIR, or the k8s-images helper's cache
// once READY), skipping the test without one.
func kubeBinary(t *testing.T, name string) string {
	t.Helper()

	dirs := []string{os.Getenv("KUBE_BIN_DIR")}
	if _, err := os.Stat("/work/cache/kube/READY"); err == nil {
		dirs = append(dirs, "/work/cache/kube")
	}

	for _, d := range dirs {
		if d == "" {
			continue
		}

		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}

	t.Skipf("no %s binary: set KUBE_BIN_DIR to a folder holding the Kubernetes v1.34 binaries", name)

	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)

	return err == nil
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// startAPIServer runs our etcd and a real kube-apiserver on 127.5.14.1 and returns the admin
// kubeconfig; both are stopped when the test ends.
func startAPIServer(t *testing.T) string {
	t.Helper()

	apiserver := kubeBinary(t, "kube-apiserver")
	etcdBin := testenv.EtcdBinary(t)
	dir := t.TempDir()

	const host = "127.5.14.1"

	etcd := exec.Command(etcdBin, "--name=t", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://"+host+":2379", "--advertise-client-urls=http://"+host+":2379",
		"--listen-peer-urls=http://"+host+":2380", "--initial-advertise-peer-urls=http://"+host+":2380",
		"--initial-cluster=t=http://"+host+":2380")
	etcd.Stderr = &testenv.SyncBuffer{}
	require.NoError(t, etcd.Start())
	t.Cleanup(func() { _ = etcd.Process.Kill(); _ = etcd.Wait() })

	gen, err := cx509.NewSelfSignedCertificateAuthority(cx509.Organization("kubernetes"), cx509.NotAfter(time.Now().Add(24*time.Hour)))
	require.NoError(t, err)
	ca, err := pki.ParseCA(gen.CrtPEM, gen.KeyPEM)
	require.NoError(t, err)

	serving, err := ca.Issue(pki.Leaf{CommonName: "kube-apiserver", IPs: []net.IP{net.ParseIP(host)}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: time.Hour}, time.Now())
	require.NoError(t, err)
	admin, err := ca.Issue(pki.Leaf{CommonName: "admin", Organizations: []string{"system:masters"}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: time.Hour}, time.Now())
	require.NoError(t, err)
	sa, err := ca.Issue(pki.Leaf{CommonName: "sa", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: time.Hour}, time.Now())
	require.NoError(t, err)

	write(t, filepath.Join(dir, "ca.crt"), gen.CrtPEM)
	write(t, filepath.Join(dir, "apiserver.crt"), serving.Crt)
	write(t, filepath.Join(dir, "apiserver.key"), serving.Key)
	write(t, filepath.Join(dir, "sa.key"), sa.Key)

	var logs testenv.SyncBuffer

	cmd := exec.Command(apiserver,
		"--etcd-servers=http://"+host+":2379",
		"--bind-address="+host, "--advertise-address="+host, "--secure-port=6443",
		"--tls-cert-file="+filepath.Join(dir, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(dir, "apiserver.key"),
		"--client-ca-file="+filepath.Join(dir, "ca.crt"),
		"--service-account-key-file="+filepath.Join(dir, "sa.key"), "--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-issuer=https://"+host+":6443",
		"--service-cluster-ip-range=10.96.0.0/12", "--authorization-mode=Node,RBAC",
		"--cert-dir="+filepath.Join(dir, "certs"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()

		if t.Failed() {
			t.Logf("kube-apiserver:\n%s", logs.String())
		}
	})

	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: t
  cluster: {server: "https://%s:6443", certificate-authority-data: %s}
users:
- name: admin
  user: {client-certificate-data: %s, client-key-data: %s}
contexts:
- name: admin@t
  context: {cluster: t, user: admin}
current-context: admin@t
`, host, b64(gen.CrtPEM), b64(admin.Crt), b64(admin.Key))
}

func manifest(id string, objs ...map[string]any) *k8s.Manifest {
	m := k8s.NewManifest(k8s.ControlPlaneNamespaceName, id)
	for _, o := range objs {
		m.TypedSpec().Items = append(m.TypedSpec().Items, k8s.SingleManifest{Object: o})
	}

	return m
}

func configMap(ns, name, value string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"data":     map[string]any{"key": value},
	}
}

// TestManifestApplyRealAPIServer: against our etcd and a real kube-apiserver, the controller
// applies the manifests (the namespace of a later manifest's object first), keeps retrying
// until the API server is up, names a bad manifest, and a re-apply changes nothing.
func TestManifestApplyRealAPIServer(t *testing.T) {
	kubeconfig := startAPIServer(t)

	env := ctest.Start(t, &k8sctrl.ManifestApplyController{RetryInterval: 500 * time.Millisecond})

	kube := secrets.NewKubernetes()
	kube.TypedSpec().LocalhostAdminKubeconfig = kubeconfig

	// The ConfigMap's namespace comes in a later manifest: namespaces go first whatever the order.
	env.Create(kube,
		manifest("00-config", configMap("talos-test", "settings", "one")),
		manifest("10-namespace", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "talos-test"}}),
		manifest("20-bad", map[string]any{"apiVersion": "example.org/v1", "kind": "NoSuchKind", "metadata": map[string]any{"name": "x"}}),
	)

	// The API server takes a while to answer: the controller retries until it does.
	ctest.AssertResource(env, k8s.ManifestStatusID, func(r *k8s.ManifestStatus, a *assert.Assertions) {
		a.Equal([]string{"00-config", "10-namespace"}, r.TypedSpec().ManifestsApplied, "the bad manifest is not applied")
	})

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cm, err := cs.CoreV1().ConfigMaps("talos-test").Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "one", cm.Data["key"])
	require.Len(t, cm.ManagedFields, 1)
	assert.Equal(t, k8sctrl.ManifestFieldManager, cm.ManagedFields[0].Manager)
	assert.Equal(t, metav1.ManagedFieldsOperationApply, cm.ManagedFields[0].Operation)

	// Fixing the bad manifest and changing another: both applied, the unchanged objects kept.
	before := cm.ResourceVersion

	env.Put(manifest("20-bad", configMap("talos-test", "fixed", "two")))

	ctest.AssertResource(env, k8s.ManifestStatusID, func(r *k8s.ManifestStatus, a *assert.Assertions) {
		a.Equal([]string{"00-config", "10-namespace", "20-bad"}, r.TypedSpec().ManifestsApplied)
	})

	fixed, err := cs.CoreV1().ConfigMaps("talos-test").Get(ctx, "fixed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "two", fixed.Data["key"])

	cm, err = cs.CoreV1().ConfigMaps("talos-test").Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, before, cm.ResourceVersion, "re-applying an unchanged object does not change it")

	// An object the API server cannot place names its manifest, kind and name.
	err = k8sctrl.ApplyManifests(ctx, kubeconfig, manifest("30-broken",
		map[string]any{"apiVersion": "example.org/v1", "kind": "NoSuchKind", "metadata": map[string]any{"name": "x"}}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `manifest "30-broken": NoSuchKind "x": no matches for kind "NoSuchKind"`)
}
