package container

// machine.nodeLabels, nodeAnnotations and nodeTaints reach the Kubernetes Node and follow the
// config, and a cordon Talos made ends after the node is back. Named to run before
// cluster_test.go, whose tests reset and destroy the worker.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-go/talos/internal/testenv"
)

const (
	ownedLabels  = "talos.dev/owned-labels"
	cordonMarker = "talos.dev/cordoned"
)

// nodeConfig replaces the node's machine.nodeLabels, nodeAnnotations and nodeTaints (JSON
// patch: a merge patch cannot drop a key), without a reboot.
func nodeConfig(t *testing.T, node, labels, annotations, taints string) {
	t.Helper()

	must(t, "-n", node, "patch", "machineconfig", "--mode", "no-reboot", "-p", fmt.Sprintf(
		`[{"op":"add","path":"/machine/nodeLabels","value":%s},{"op":"add","path":"/machine/nodeAnnotations","value":%s},{"op":"add","path":"/machine/nodeTaints","value":%s}]`,
		labels, annotations, taints))
}

// waitNode waits until check holds on the Node name.
func waitNode(t *testing.T, cs kubernetes.Interface, name, what string, check func(*corev1.Node) error) {
	t.Helper()

	testenv.WaitFor(t, what, 2*time.Minute, func() error {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		return check(n)
	})
}

func taint(n *corev1.Node, key string) *corev1.Taint {
	if i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key }); i >= 0 {
		return &n.Spec.Taints[i]
	}

	return nil
}

// TestNodeLabelsTaintsAnnotationsFollowConfig: the worker's config labels and annotations
// appear on its Node (its taint is refused by NodeRestriction, as upstream: a worker's own
// credentials may not change its taints, and the rest still goes through); changing one and
// dropping the others makes the Node follow, while a label set with kubectl stays. The
// control plane (admin credentials) gets its config taint and loses it when it is dropped.
func TestNodeLabelsTaintsAnnotationsFollowConfig(t *testing.T) {
	cs, _ := kube(t)
	worker, cpNode := clusterName+"-worker-1", clusterName+"-controlplane-1"

	if _, err := cs.CoreV1().Nodes().Patch(t.Context(), worker, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"e2e.example.com/by-kubectl":"keep"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		nodeConfig(t, w, `{}`, `{}`, `{}`)
		nodeConfig(t, cp, `{}`, `{}`, `{}`)
	})

	nodeConfig(t, w, `{"e2e.talos.dev/a":"1","e2e.talos.dev/b":"2"}`, `{"e2e.talos.dev/note":"n1"}`, `{"e2e.talos.dev/t":"v:PreferNoSchedule"}`)
	waitNode(t, cs, worker, "the worker's config labels and annotation", func(n *corev1.Node) error {
		if n.Labels["e2e.talos.dev/a"] != "1" || n.Labels["e2e.talos.dev/b"] != "2" || n.Annotations["e2e.talos.dev/note"] != "n1" {
			return fmt.Errorf("labels %v, annotations %v", n.Labels, n.Annotations)
		}

		if n.Annotations[ownedLabels] != `["e2e.talos.dev/a","e2e.talos.dev/b"]` {
			return fmt.Errorf("owned labels %q", n.Annotations[ownedLabels])
		}

		return nil
	})

	nodeConfig(t, w, `{"e2e.talos.dev/a":"3"}`, `{}`, `{}`)
	waitNode(t, cs, worker, "the worker's Node following the config", func(n *corev1.Node) error {
		if _, ok := n.Labels["e2e.talos.dev/b"]; ok || n.Labels["e2e.talos.dev/a"] != "3" {
			return fmt.Errorf("labels %v", n.Labels)
		}

		if _, ok := n.Annotations["e2e.talos.dev/note"]; ok {
			return fmt.Errorf("annotations %v", n.Annotations)
		}

		return nil
	})

	n, err := cs.CoreV1().Nodes().Get(t.Context(), worker, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if n.Labels["e2e.example.com/by-kubectl"] != "keep" {
		t.Fatalf("the label set with kubectl is gone: %v", n.Labels)
	}

	if taint(n, "e2e.talos.dev/t") != nil {
		t.Fatalf("the worker changed its own taints: %v", n.Spec.Taints)
	}

	nodeConfig(t, cp, `{}`, `{}`, `{"e2e.talos.dev/t":"v:PreferNoSchedule"}`)
	waitNode(t, cs, cpNode, "the control plane's config taint", func(n *corev1.Node) error {
		if tt := taint(n, "e2e.talos.dev/t"); tt == nil || tt.Value != "v" || tt.Effect != corev1.TaintEffectPreferNoSchedule {
			return fmt.Errorf("taints %v", n.Spec.Taints)
		}

		return nil
	})

	nodeConfig(t, cp, `{}`, `{}`, `{}`)
	waitNode(t, cs, cpNode, "the control plane's config taint removed", func(n *corev1.Node) error {
		if taint(n, "e2e.talos.dev/t") != nil {
			return fmt.Errorf("taints %v", n.Spec.Taints)
		}

		if taint(n, "node-role.kubernetes.io/control-plane") == nil {
			return fmt.Errorf("the control plane's own taint went too: %v", n.Spec.Taints)
		}

		return nil
	})
}

// TestUncordonAfterReboot: a Node cordoned by Talos (unschedulable with its talos.dev/cordoned
// marker, as its drain leaves it) while the worker goes down is uncordoned once the worker is
// back and its kubelet Ready; a Node cordoned by an admin (no marker) stays cordoned.
func TestUncordonAfterReboot(t *testing.T) {
	cs, _ := kube(t)
	worker := clusterName + "-worker-1"
	nodes := cs.CoreV1().Nodes()

	t.Cleanup(func() {
		nodes.Patch(context.Background(), worker, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{})
	})

	// An admin's cordon, then a config change: the controller runs and leaves the cordon.
	if _, err := nodes.Patch(t.Context(), worker, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	nodeConfig(t, w, `{"e2e.talos.dev/ping":"1"}`, `{}`, `{}`)
	waitNode(t, cs, worker, "the ping label", func(n *corev1.Node) error {
		if n.Labels["e2e.talos.dev/ping"] != "1" {
			return fmt.Errorf("labels %v", n.Labels)
		}

		return nil
	})

	time.Sleep(12 * time.Second) // two of the controller's retry intervals

	if n, err := nodes.Get(t.Context(), worker, metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("an admin's cordon was ended (or %v)", err)
	}

	nodeConfig(t, w, `{}`, `{}`, `{}`)

	// Talos's cordon: marked while the worker is going down, as its drain marks it.
	id := bootID(t, w)
	before := time.Now()
	must(t, "-n", w, "reboot", "--wait=false")

	testenv.WaitFor(t, "the worker going down", time.Minute, func() error {
		out, _, code := talosctl(t, "-n", w, "get", "machinestatus", "-o", "jsonpath={.spec.stage}")
		if code == 0 && !strings.Contains(out, "rebooting") {
			return fmt.Errorf("stage %q", strings.TrimSpace(out))
		}

		return nil
	})

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}},"spec":{"unschedulable":true}}`, cordonMarker)
	if _, err := nodes.Patch(t.Context(), worker, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "the worker back", 4*time.Minute, func() error {
		if after, _, code := talosctl(t, "-n", w, "read", "/proc/sys/kernel/random/boot_id"); code != 0 || strings.TrimSpace(after) == id {
			return fmt.Errorf("boot id %q (exit %d)", strings.TrimSpace(after), code)
		}

		return nil
	})

	waitNodeReady(t, cs, worker, w, before, time.Now(), 4*time.Minute)

	waitNode(t, cs, worker, "the worker uncordoned", func(n *corev1.Node) error {
		if _, marked := n.Annotations[cordonMarker]; n.Spec.Unschedulable || marked {
			return fmt.Errorf("unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
		}

		return nil
	})
}
