package testenv

import (
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/images"
	"github.com/talos-go/talos/internal/kubeconfig"
	"github.com/talos-go/talos/internal/pki"
)

// KubeBinary finds the multi-call Kubernetes binary (kube-apiserver, kubelet, ... by its
// first argument): $KUBE_BIN, or the tool cache of `make rootfs`; without one the test is
// skipped, naming how to build it.
func KubeBinary(t testing.TB) string {
	t.Helper()

	if p := os.Getenv("KUBE_BIN"); p != "" {
		return p
	}

	_, file, _, _ := runtime.Caller(0)
	found, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "..", "..", "_out", "cache", "tools", "kube-"+images.KubernetesVersion+"-*", "kube"))

	if len(found) == 0 {
		t.Skip("the Kubernetes binary is not built: run `make rootfs` (it builds build/kubernetes into _out/cache/tools) or set KUBE_BIN")
	}

	return found[len(found)-1]
}

// StartAPIServer runs our etcd and a real kube-apiserver on host (a loopback address of the
// test's own) and returns an admin kubeconfig (system:masters); both stop when the test ends.
func StartAPIServer(t testing.TB, host string) string {
	t.Helper()

	kube := KubeBinary(t)
	etcdBin := EtcdBinary(t)
	dir := t.TempDir()

	etcd := exec.Command(etcdBin, "--name=t", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://"+host+":2379", "--advertise-client-urls=http://"+host+":2379",
		"--listen-peer-urls=http://"+host+":2380", "--initial-advertise-peer-urls=http://"+host+":2380",
		"--initial-cluster=t=http://"+host+":2380")
	etcd.Stderr = &SyncBuffer{}

	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = etcd.Process.Kill(); _ = etcd.Wait() })

	gen, err := cx509.NewSelfSignedCertificateAuthority(cx509.Organization("kubernetes"), cx509.NotAfter(time.Now().Add(24*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}

	ca, err := pki.ParseCA(gen.CrtPEM, gen.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	issue := func(l pki.Leaf) *cx509.PEMEncodedCertificateAndKey {
		p, err := ca.Issue(l, time.Now())
		if err != nil {
			t.Fatal(err)
		}

		return p
	}

	serving := issue(pki.Leaf{CommonName: "kube-apiserver", IPs: []net.IP{net.ParseIP(host)}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: time.Hour})
	admin := issue(pki.Leaf{CommonName: "admin", Organizations: []string{"system:masters"}, ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: time.Hour})
	sa := issue(pki.Leaf{CommonName: "sa", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Lifetime: time.Hour})

	for name, data := range map[string][]byte{"ca.crt": gen.CrtPEM, "apiserver.crt": serving.Crt, "apiserver.key": serving.Key, "sa.key": sa.Key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var logs SyncBuffer

	cmd := exec.Command(kube, "kube-apiserver",
		"--etcd-servers=http://"+host+":2379",
		"--bind-address="+host, "--advertise-address="+host, "--secure-port=6443",
		"--tls-cert-file="+filepath.Join(dir, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(dir, "apiserver.key"),
		"--client-ca-file="+filepath.Join(dir, "ca.crt"),
		"--service-account-key-file="+filepath.Join(dir, "sa.key"), "--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-issuer=https://"+host+":6443",
		"--service-cluster-ip-range=10.96.0.0/12", "--authorization-mode=Node,RBAC",
		"--cert-dir="+filepath.Join(dir, "certs"))
	cmd.Stdout, cmd.Stderr = &logs, &logs

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()

		if t.Failed() {
			t.Logf("kube-apiserver:\n%s", logs.String())
		}
	})

	out, err := kubeconfig.Single{
		ClusterName: "t",
		Cluster:     clientcmdapi.Cluster{Server: "https://" + host + ":6443", CertificateAuthorityData: gen.CrtPEM},
		UserName:    "admin",
		User:        clientcmdapi.AuthInfo{ClientCertificateData: admin.Crt, ClientKeyData: admin.Key},
		ContextName: "admin@t",
	}.Encode()
	if err != nil {
		t.Fatal(err)
	}

	return string(out)
}
