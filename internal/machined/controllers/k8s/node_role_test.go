package k8s_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/testenv"
)

// TestMarkControlPlane: against a real kube-apiserver, the control plane's Node gets upstream's
// role label and NoSchedule taint, once; allowing scheduling removes the taint, keeps the label.
func TestMarkControlPlane(t *testing.T) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(testenv.StartAPIServer(t, "127.5.14.3")))
	if err != nil {
		t.Fatal(err)
	}

	nodes := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	ctx := testenv.Context(t, time.Minute)

	testenv.WaitFor(t, "the API server", 45*time.Second, func() error {
		_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp1"}}, metav1.CreateOptions{})

		return err
	})

	if err = k8sctrl.MarkControlPlane(ctx, nodes, "missing", true); err == nil {
		t.Fatal("marking a node that is not registered succeeded")
	}

	check := func(tainted bool) {
		t.Helper()

		n, err := nodes.Get(ctx, "cp1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		if _, ok := n.Labels[k8sctrl.ControlPlaneRole]; !ok {
			t.Errorf("no %s label: %v", k8sctrl.ControlPlaneRole, n.Labels)
		}

		want, got := 0, 0
		if tainted {
			want = 1
		}

		for _, taint := range n.Spec.Taints { // the API server adds its own (not-ready)
			if taint.Key == k8sctrl.ControlPlaneRole && taint.Effect == corev1.TaintEffectNoSchedule {
				got++
			}
		}

		if got != want {
			t.Errorf("taints %v, want %d control plane NoSchedule taint(s)", n.Spec.Taints, want)
		}
	}

	for range 2 { // the second time changes nothing
		if err = k8sctrl.MarkControlPlane(ctx, nodes, "cp1", true); err != nil {
			t.Fatal(err)
		}

		check(true)
	}

	if err = k8sctrl.MarkControlPlane(ctx, nodes, "cp1", false); err != nil {
		t.Fatal(err)
	}

	check(false)
}
