package k8s

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// ControlPlaneRole is the label and taint key of a control plane node.
const ControlPlaneRole = "node-role.kubernetes.io/control-plane"

// NodeRoleController marks this control plane's Node as upstream does, with its admin
// credentials (kubelet may not set node-role labels itself): the label
// node-role.kubernetes.io/control-plane, and the NoSchedule taint of that key unless
// cluster.allowSchedulingOnControlPlanes. It retries until the Node is registered.
type NodeRoleController struct {
	// RetryInterval is the wait between attempts while the Node or the API is not there (default 5s).
	RetryInterval time.Duration
}

// Name implements controller.Controller.
func (ctrl *NodeRoleController) Name() string { return "k8s.NodeRoleController" }

// Inputs implements controller.Controller.
func (ctrl *NodeRoleController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *NodeRoleController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *NodeRoleController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.RetryInterval
	if interval == 0 {
		interval = 5 * time.Second
	}

	var retry <-chan time.Time

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-retry:
		}

		retry = nil

		if err := ctrl.reconcile(ctx, r); err != nil {
			log.Debug("marking the control plane node, will retry", zap.Error(err))

			retry = time.After(interval)
		}
	}
}

func (ctrl *NodeRoleController) reconcile(ctx context.Context, r controller.Runtime) error {
	kube, err := kubeclient.Get(ctx, r)
	if state.IsNotFoundError(err) {
		return nil // not a control plane, or its secrets are not there yet
	} else if err != nil {
		return err
	}

	nodename, err := safe.ReaderGetByID[*k8s.Nodename](ctx, r, k8s.NodenameID)
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	taint := cfg.Config().Cluster() == nil || !cfg.Config().Cluster().ScheduleOnControlPlanes()

	rest, err := kubeclient.LocalAdmin(kube, 10*time.Second)
	if err != nil {
		return err
	}

	client, err := corev1client.NewForConfig(rest)
	if err != nil {
		return err
	}

	return MarkControlPlane(ctx, client.Nodes(), nodename.TypedSpec().Nodename, taint)
}

// MarkControlPlane gives the Node the control plane label and, with taint, the NoSchedule
// taint (without, it removes that taint); it writes only when something changes.
func MarkControlPlane(ctx context.Context, nodes corev1client.NodeInterface, name string, taint bool) error {
	node, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}

	changed := false

	if _, ok := node.Labels[ControlPlaneRole]; !ok {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}

		node.Labels[ControlPlaneRole] = ""
		changed = true
	}

	i := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == ControlPlaneRole && t.Effect == corev1.TaintEffectNoSchedule
	})

	switch {
	case taint && i < 0:
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: ControlPlaneRole, Effect: corev1.TaintEffectNoSchedule})
		changed = true
	case !taint && i >= 0:
		node.Spec.Taints = slices.Delete(node.Spec.Taints, i, i+1)
		changed = true
	}

	if !changed {
		return nil
	}

	_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})

	return err
}
