package upgrade

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/machined/drain"
	"github.com/talos-go/talos/internal/machined/services"
)

// drainTimeout bounds a drain: pods that do not leave by then fail the graceful action, which
// names them (--graceful=false skips the drain).
const drainTimeout = 3 * time.Minute

// cordonAndDrain cordons this node and evicts its pods, with the admin credentials on a control
// plane and kubelet's own on a worker; a node that runs no Kubernetes skips it.
func (m *Manager) cordonAndDrain(ctx context.Context, log *zap.Logger) error {
	if !services.RunsKubernetes() {
		log.Info("cordon and drain skipped: this node runs no Kubernetes")

		return nil
	}

	nodename, err := safe.StateGetByID[*k8s.Nodename](ctx, m.R.State, k8s.NodenameID)
	if err != nil {
		return fmt.Errorf("cordon and drain: the node's Kubernetes name: %w", err)
	}

	var kubeconfig []byte

	if kube, err := safe.StateGetByID[*secrets.Kubernetes](ctx, m.R.State, secrets.KubernetesID); err == nil {
		kubeconfig = []byte(kube.TypedSpec().LocalhostAdminKubeconfig)
	} else if kubeconfig, err = os.ReadFile(k8sctrl.KubeletKubeconfig); err != nil {
		log.Info("cordon and drain skipped: kubelet has not joined the cluster", zap.Error(err))

		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()

	if err = drain.Node(ctx, kubeconfig, nodename.TypedSpec().Nodename, log); err != nil {
		return fmt.Errorf("%w (use --graceful=false to skip the drain)", err)
	}

	return nil
}
