// Package kubeclient is the one way machined talks to Kubernetes: as the cluster admin, with
// the secrets controller's localhost admin kubeconfig (system:masters, the control plane's own
// API server on localhost), which only a control plane holds; and as a node (ForNode), the
// admin's on a control plane and kubelet's own credentials on a worker.
package kubeclient

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/pki"
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

// ForNode is the client config a node uses for its own Node and the cluster's: the localhost
// admin's on a control plane (worker false), else kubelet's client certificate and key
// (kubeletCert, one file, once the kubelet has joined) against the endpoint and CAs of the
// secrets' Kubelet (worker true). Nil while the node has neither. timeout bounds each request.
func ForNode(ctx context.Context, st Getter, kubeletCert string, timeout time.Duration) (*rest.Config, bool, error) {
	kube, err := Get(ctx, st)
	if err == nil {
		cfg, err := LocalAdmin(kube, timeout)

		return cfg, false, err
	} else if !state.IsNotFoundError(err) {
		return nil, false, err
	}

	if _, err = os.Stat(kubeletCert); err != nil {
		return nil, true, nil //nolint:nilerr // kubelet has not joined yet
	}

	r, err := st.Get(ctx, resource.NewMetadata(secrets.NamespaceName, secrets.KubeletType, secrets.KubeletID, resource.VersionUndefined))
	if state.IsNotFoundError(err) {
		return nil, true, nil
	} else if err != nil {
		return nil, true, err
	}

	kubelet, ok := r.(*secrets.Kubelet)
	if !ok {
		return nil, true, fmt.Errorf("%s is a %T, want *secrets.Kubelet", secrets.KubeletID, r)
	}

	var cas [][]byte
	for _, ca := range kubelet.TypedSpec().AcceptedCAs {
		cas = append(cas, ca.Crt)
	}

	return &rest.Config{
		Host:    kubelet.TypedSpec().Endpoint.String(),
		Timeout: timeout,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.Bundle(cas...),
			CertFile: kubeletCert,
			KeyFile:  kubeletCert,
		},
	}, true, nil
}
