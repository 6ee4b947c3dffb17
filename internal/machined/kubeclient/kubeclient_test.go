package kubeclient_test

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/kubeconfig"
	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// TestLoad: a node without Kubernetes secrets gets NotFound; a control plane gets its
// localhost admin kubeconfig as a client config with the asked timeout.
func TestLoad(t *testing.T) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	if _, err := kubeclient.Load(t.Context(), st, time.Second); !state.IsNotFoundError(err) {
		t.Fatalf("without secrets: %v, want NotFound", err)
	}

	kc, err := kubeconfig.Single{
		ClusterName: "c",
		Cluster:     clientcmdapi.Cluster{Server: "https://localhost:6443"},
		UserName:    "admin",
		User:        clientcmdapi.AuthInfo{Token: "t"},
		ContextName: "admin@c",
	}.Encode()
	if err != nil {
		t.Fatal(err)
	}

	kube := secrets.NewKubernetes()
	kube.TypedSpec().LocalhostAdminKubeconfig = string(kc)

	if err = st.Create(t.Context(), kube); err != nil {
		t.Fatal(err)
	}

	cfg, err := kubeclient.Load(t.Context(), st, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	if cfg.Host != "https://localhost:6443" || cfg.BearerToken != "t" || cfg.Timeout != 7*time.Second {
		t.Errorf("config: host %q token %q timeout %s", cfg.Host, cfg.BearerToken, cfg.Timeout)
	}
}

// TestForNode: a worker has no credentials until its kubelet has joined (its client
// certificate file) and the Kubelet secrets are there, then kubelet's own against their
// endpoint; a control plane has the admin's.
func TestForNode(t *testing.T) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))
	cert := filepath.Join(t.TempDir(), "kubelet-client-current.pem")

	cfg, worker, err := kubeclient.ForNode(t.Context(), st, cert, time.Second)
	if err != nil || cfg != nil || !worker {
		t.Fatalf("before the join: %v %v %v, want no credentials of a worker", cfg, worker, err)
	}

	if err = os.WriteFile(cert, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}

	if cfg, _, err = kubeclient.ForNode(t.Context(), st, cert, time.Second); err != nil || cfg != nil {
		t.Fatalf("without the Kubelet secrets: %v %v, want none", cfg, err)
	}

	kubelet := secrets.NewKubelet(secrets.KubeletID)
	kubelet.TypedSpec().Endpoint = &url.URL{Scheme: "https", Host: "10.5.0.2:6443"}

	if err = st.Create(t.Context(), kubelet); err != nil {
		t.Fatal(err)
	}

	cfg, worker, err = kubeclient.ForNode(t.Context(), st, cert, 3*time.Second)
	if err != nil || cfg == nil || !worker || cfg.Host != "https://10.5.0.2:6443" || cfg.CertFile != cert || cfg.Timeout != 3*time.Second {
		t.Fatalf("worker: %+v %v %v", cfg, worker, err)
	}

	kube := secrets.NewKubernetes()
	kube.TypedSpec().LocalhostAdminKubeconfig = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://localhost:6443'}}]\n" +
		"users: [{name: a, user: {token: t}}]\ncontexts: [{name: a@c, context: {cluster: c, user: a}}]\ncurrent-context: a@c\n"

	if err = st.Create(t.Context(), kube); err != nil {
		t.Fatal(err)
	}

	if cfg, worker, err = kubeclient.ForNode(t.Context(), st, cert, time.Second); err != nil || worker || cfg.BearerToken != "t" {
		t.Fatalf("control plane: %+v %v %v, want the admin's", cfg, worker, err)
	}
}
