package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/machined/drain"
	"github.com/talos-go/talos/internal/machined/kubeclient"
	"github.com/talos-go/talos/internal/pki"
)

// drainTimeout bounds a drain: pods that do not leave by then fail the graceful action, which
// names them (--graceful=false skips the drain).
const drainTimeout = 3 * time.Minute

// cordonAndDrain cordons this node and evicts its pods, with the admin credentials on a control
// plane and kubelet's client certificate on a worker; a node that runs no Kubernetes, or never
// joined, skips it.
func (m *Manager) cordonAndDrain(ctx context.Context, log *zap.Logger) error {
	if !m.R.Mode.RunsKubernetes() {
		log.Info("cordon and drain skipped: this node runs no Kubernetes")

		return nil
	}

	if m.R.Config() == nil {
		log.Info("cordon and drain skipped: the node has no config (maintenance mode), so it is in no cluster")

		return nil
	}

	nodename, err := safe.StateGetByID[*k8s.Nodename](ctx, m.R.State, k8s.NodenameID)
	if err != nil {
		return fmt.Errorf("cordon and drain: the node's Kubernetes name: %w", err)
	}

	cfg, err := m.drainCredentials(ctx)
	if err != nil {
		return fmt.Errorf("cordon and drain: %w", err)
	}

	if cfg == nil {
		log.Info("cordon and drain skipped: kubelet has not joined the cluster (no client certificate)")

		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()

	return drain.Node(ctx, cfg, nodename.TypedSpec().Nodename, log)
}

// kubeletClientCert is kubelet's client certificate and key in one file, on /var: the node's
// Kubernetes identity from its first join on, across reboots (kubelet's kubeconfig is written
// again a while after each boot).
var kubeletClientCert = filepath.Join(k8sctrl.KubeletCertDir, "kubelet-client-current.pem")

// drainCredentials are the admin credentials on a control plane, else the node's own
// (the Node authorizer lets a node cordon itself and evict its own pods); nil when this node
// never joined.
func (m *Manager) drainCredentials(ctx context.Context) (*rest.Config, error) {
	if kube, err := safe.StateGetByID[*secrets.Kubernetes](ctx, m.R.State, secrets.KubernetesID); err == nil {
		return kubeclient.LocalAdmin(kube, 0)
	}

	if _, err := os.Stat(kubeletClientCert); err != nil {
		return nil, nil //nolint:nilerr // never joined: nothing to drain
	}

	kubelet, err := safe.StateGetByID[*secrets.Kubelet](ctx, m.R.State, secrets.KubeletID)
	if err != nil {
		return nil, fmt.Errorf("the cluster's endpoint and CA: %w", err)
	}

	var cas [][]byte
	for _, ca := range kubelet.TypedSpec().AcceptedCAs {
		cas = append(cas, ca.Crt)
	}

	return &rest.Config{
		Host: kubelet.TypedSpec().Endpoint.String(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.Bundle(cas...),
			CertFile: kubeletClientCert,
			KeyFile:  kubeletClientCert,
		},
	}, nil
}
