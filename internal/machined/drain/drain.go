// Package drain cordons this node in Kubernetes and evicts its pods, as upstream does before a
// graceful reset or an upgrade: DaemonSet pods and static (mirror) pods stay, as with
// `kubectl drain --ignore-daemonsets`.
package drain

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Node cordons the Node name and evicts its pods, waiting until they are gone or ctx ends.
func Node(ctx context.Context, cfg *rest.Config, name string, log *zap.Logger) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 15 * time.Second

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	if err = cordon(ctx, cs, name, log); err != nil {
		return err
	}

	for {
		pods, err := evictable(ctx, cs, name)
		if err != nil {
			return err
		}

		if len(pods) == 0 {
			log.Info("node drained", zap.String("node", name))

			return nil
		}

		var names []string

		for _, p := range pods {
			names = append(names, p.Namespace+"/"+p.Name)

			if p.DeletionTimestamp != nil {
				continue
			}

			err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsTooManyRequests(err) { // 429: a disruption budget, retried
				return fmt.Errorf("evicting %s/%s: %w", p.Namespace, p.Name, err)
			}
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("draining node %s: pods still there: %s: %w", name, strings.Join(names, ", "), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// cordon marks the Node unschedulable with upstream's talos.dev/cordoned annotation, which
// tells machined to uncordon it once it runs again (k8s.NodeApplyController). A Node already
// cordoned (by its admin) gets no marker: it stays cordoned after the reboot.
func cordon(ctx context.Context, cs kubernetes.Interface, name string, log *zap.Logger) error {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cordoning node %s: %w", name, err)
	}

	if node.Spec.Unschedulable {
		_, byTalos := node.Annotations[constants.AnnotationCordonedKey]
		log.Info("node already cordoned", zap.String("node", name), zap.Bool("by_talos", byTalos))

		return nil
	}

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"unschedulable":true}}`, constants.AnnotationCordonedKey, constants.AnnotationCordonedValue)
	if _, err = cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordoning node %s: %w", name, err)
	}

	log.Info("node cordoned", zap.String("node", name))

	return nil
}

// evictable lists the node's pods a drain evicts: not mirror pods, not DaemonSet pods, not
// finished ones.
func evictable(ctx context.Context, cs kubernetes.Interface, node string) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}

	var out []corev1.Pod

	for _, p := range list.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}

		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}

		daemon := false

		for _, o := range p.OwnerReferences {
			daemon = daemon || o.Kind == "DaemonSet"
		}

		if !daemon {
			out = append(out, p)
		}
	}

	return out, nil
}
