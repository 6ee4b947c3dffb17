package kubeclient_test

import (
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
