// Package kubeclient is the one way machined talks to Kubernetes as the cluster admin: the
// secrets controller's localhost admin kubeconfig (system:masters, the control plane's own API
// server on localhost), which only a control plane holds.
package kubeclient

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Getter is what a controller's runtime and the resource state both offer.
type Getter interface {
	Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error)
}

// Get reads the node's Kubernetes secrets; a NotFound error (state.IsNotFoundError) means a
// worker, or a control plane whose secrets are not generated yet.
func Get(ctx context.Context, st Getter) (*secrets.Kubernetes, error) {
	r, err := st.Get(ctx, resource.NewMetadata(secrets.NamespaceName, secrets.KubernetesType, secrets.KubernetesID, resource.VersionUndefined))
	if err != nil {
		return nil, err
	}

	kube, ok := r.(*secrets.Kubernetes)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, want *secrets.Kubernetes", secrets.KubernetesID, r)
	}

	return kube, nil
}

// LocalAdmin is the client config of kube's localhost admin kubeconfig; timeout bounds each
// request (0: no bound).
func LocalAdmin(kube *secrets.Kubernetes, timeout time.Duration) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kube.TypedSpec().LocalhostAdminKubeconfig))
	if err != nil {
		return nil, err
	}

	cfg.Timeout = timeout

	return cfg, nil
}

// Load reads the node's Kubernetes secrets and returns their LocalAdmin config; the error of a
// node without them is NotFound, as Get's.
func Load(ctx context.Context, st Getter, timeout time.Duration) (*rest.Config, error) {
	kube, err := Get(ctx, st)
	if err != nil {
		return nil, err
	}

	return LocalAdmin(kube, timeout)
}
