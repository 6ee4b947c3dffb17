package k8s

import (
	"context"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// mirrorAnnotation marks the API server's mirror of a static pod.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// StaticPodStatusController publishes StaticPodStatus for each static pod of this control plane
// ("kube-system/kube-apiserver-<node>"), with the pod's status as the API server's mirror pod
// holds it (upstream asks kubelet; the status is the same PodStatus), refreshed every Interval.
type StaticPodStatusController struct {
	Interval time.Duration // default 10s
}

// Name implements controller.Controller.
func (ctrl *StaticPodStatusController) Name() string { return "k8s.StaticPodStatusController" }

// Inputs implements controller.Controller.
func (ctrl *StaticPodStatusController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *StaticPodStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.StaticPodStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *StaticPodStatusController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.Interval
	if interval == 0 {
		interval = 10 * time.Second
	}

	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticker.C:
		}

		if err := ctrl.reconcile(ctx, r); err != nil {
			log.Debug("reading the static pods' status", zap.Error(err))
		}
	}
}

func (ctrl *StaticPodStatusController) reconcile(ctx context.Context, r controller.Runtime) error {
	kube, err := kubeclient.Get(ctx, r)
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	nodename, err := safe.ReaderGetByID[*k8s.Nodename](ctx, r, k8s.NodenameID)
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	rest, err := kubeclient.LocalAdmin(kube, 10*time.Second)
	if err != nil {
		return err
	}

	client, err := corev1client.NewForConfig(rest)
	if err != nil {
		return err
	}

	pods, err := client.Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodename.TypedSpec().Nodename})
	if err != nil {
		return err // the API is down: the last statuses stay
	}

	r.StartTrackingOutputs()

	for _, pod := range pods.Items {
		if _, mirror := pod.Annotations[mirrorAnnotation]; !mirror {
			continue
		}

		status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pod.Status)
		if err != nil {
			return err
		}

		if err = safe.WriterModify(ctx, r, k8s.NewStaticPodStatus(k8s.NamespaceName, pod.Namespace+"/"+pod.Name), func(res *k8s.StaticPodStatus) error {
			res.TypedSpec().PodStatus = status

			return nil
		}); err != nil {
			return err
		}
	}

	return safe.CleanupOutputs[*k8s.StaticPodStatus](ctx, r)
}
