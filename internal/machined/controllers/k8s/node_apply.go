package k8s

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// NodeApplyController puts the NodeLabelSpecs, NodeAnnotationSpecs and NodeTaintSpecs on this
// node's Kubernetes Node (ApplyNodeSpec says how) and cordons it while NodeCordonedSpec
// exists. A cordon Talos made ends once the node runs again and its kubelet has reported
// Ready since machined started. It writes with the admin credentials on a control plane and
// kubelet's own on a worker, as upstream; the API server's NodeRestriction refuses a worker
// changing its own taints, so there the labels and annotations still go through and the
// refusal is logged.
type NodeApplyController struct {
	// RetryInterval is the wait between attempts while the Node, the API or the kubelet's
	// readiness is not there yet (default 5s).
	RetryInterval time.Duration
	// Started is when this machined started: a Ready status older than that is the previous
	// boot's kubelet (default: the controller's first run).
	Started time.Time
}

// errNotYet is a reconcile that has to wait (no credentials, no Node, no Ready kubelet).
var errNotYet = errors.New("not yet")

// Name implements controller.Controller.
func (ctrl *NodeApplyController) Name() string { return "k8s.NodeApplyController" }

// Inputs implements controller.Controller.
func (ctrl *NodeApplyController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: k8s.NamespaceName, Type: k8s.NodeLabelSpecType, Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodeAnnotationSpecType, Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodeTaintSpecType, Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodeCordonedSpecType, Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
		{Namespace: runtimeres.NamespaceName, Type: runtimeres.MachineStatusType, ID: optional.Some(runtimeres.MachineStatusID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubeletType, ID: optional.Some(secrets.KubeletID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *NodeApplyController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *NodeApplyController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.RetryInterval
	if interval == 0 {
		interval = 5 * time.Second
	}

	if ctrl.Started.IsZero() {
		ctrl.Started = time.Now()
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

		if err := ctrl.reconcile(ctx, r, log); err != nil {
			if !errors.Is(err, errNotYet) {
				log.Debug("applying the node's labels, annotations, taints and cordon, will retry", zap.Error(err))
			}

			retry = time.After(interval)
		}
	}
}

func (ctrl *NodeApplyController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	nodename, err := safe.ReaderGetByID[*k8s.Nodename](ctx, r, k8s.NodenameID)
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	if nodename.TypedSpec().SkipNodeRegistration {
		return nil
	}

	spec, err := ctrl.spec(ctx, r)
	if err != nil {
		return err
	}

	creds, worker, err := kubeclient.ForNode(ctx, r, KubeletClientCert, 10*time.Second)
	if err != nil || creds == nil {
		return errors.Join(errNotYet, err)
	}

	client, err := corev1client.NewForConfig(creds)
	if err != nil {
		return err
	}

	nodes := client.Nodes()
	name := nodename.TypedSpec().Nodename

	node, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}

	stage, err := safe.ReaderGetByID[*runtimeres.MachineStatus](ctx, r, runtimeres.MachineStatusID)
	if err != nil && !state.IsNotFoundError(err) {
		return err
	}

	spec.Uncordon = err == nil && stage.TypedSpec().Stage == runtimeres.MachineStageRunning && ReadySince(node, ctrl.Started)

	if _, err = ApplyNodeSpec(node, spec, true); err != nil {
		return err
	}

	_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
	if worker && apierrors.IsForbidden(err) {
		// NodeRestriction: a kubelet may not change its own Node's taints. The rest goes on.
		log.Warn("machine.nodeTaints: the API server does not let a worker change its own Node's taints (NodeRestriction); "+
			"the labels and annotations are applied, the taints are not: set them with an admin's kubectl", zap.Error(err))

		if node, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}

		if _, err = ApplyNodeSpec(node, spec, false); err != nil {
			return err
		}

		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
	}

	if apierrors.IsForbidden(err) {
		// Retrying changes nothing: the next config change tries again.
		log.Warn("machine.nodeLabels, machine.nodeAnnotations: the API server refused them on this Node "+
			"(a worker may not set labels under kubernetes.io or k8s.io but a few, NodeRestriction): remove them from the config", zap.Error(err))

		return nil
	}

	if err != nil {
		return fmt.Errorf("updating node %s: %w", name, err)
	}

	if !spec.Cordon && CordonPending(node) {
		return errNotYet // Talos's cordon ends once the kubelet is Ready: look again
	}

	return nil
}

// spec gathers what the config and the machine's stage want on the Node.
func (ctrl *NodeApplyController) spec(ctx context.Context, r controller.Runtime) (NodeSpec, error) {
	spec := NodeSpec{Labels: map[string]string{}, Annotations: map[string]string{}}

	labels, err := safe.ReaderListAll[*k8s.NodeLabelSpec](ctx, r)
	if err != nil {
		return spec, err
	}

	for l := range labels.All() {
		spec.Labels[l.TypedSpec().Key] = l.TypedSpec().Value
	}

	annotations, err := safe.ReaderListAll[*k8s.NodeAnnotationSpec](ctx, r)
	if err != nil {
		return spec, err
	}

	for a := range annotations.All() {
		spec.Annotations[a.TypedSpec().Key] = a.TypedSpec().Value
	}

	taints, err := safe.ReaderListAll[*k8s.NodeTaintSpec](ctx, r)
	if err != nil {
		return spec, err
	}

	for t := range taints.All() {
		spec.Taints = append(spec.Taints, *t.TypedSpec())
	}

	cordoned, err := safe.ReaderListAll[*k8s.NodeCordonedSpec](ctx, r)
	if err != nil {
		return spec, err
	}

	spec.Cordon = cordoned.Len() > 0

	return spec, nil
}

// KubeletClientCert is kubelet's client certificate and key in one file: the node's
// Kubernetes identity from its first join on, across reboots.
var KubeletClientCert = filepath.Join(KubeletCertDir, "kubelet-client-current.pem")

// ReadySince reports a Node whose kubelet reported it Ready at or after since (the status
// times are whole seconds).
func ReadySince(node *corev1.Node, since time.Time) bool {
	i := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })

	return i >= 0 && node.Status.Conditions[i].Status == corev1.ConditionTrue &&
		!node.Status.Conditions[i].LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
}
