package k8s_test

import (
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/testenv"
)

// TestStaticPodStatus: against a real kube-apiserver, the node's mirror pods become
// StaticPodStatus resources with their status (upstream's IDs, namespace/name); a pod on
// another node, or one that is not a mirror, does not.
func TestStaticPodStatus(t *testing.T) {
	kubeconfig := testenv.StartAPIServer(t, "127.5.14.4")

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		t.Fatal(err)
	}

	pods := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("kube-system")
	ctx := testenv.Context(t, time.Minute)

	pod := func(name, node string, mirror bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}

		if mirror {
			p.Annotations["kubernetes.io/config.mirror"] = "hash"
		}

		return p
	}

	testenv.WaitFor(t, "the API server", 45*time.Second, func() error {
		_, err := pods.Create(ctx, pod("kube-apiserver-cp1", "cp1", true), metav1.CreateOptions{})

		return err
	})

	// A pod that is not a mirror needs its service account (no controller manager makes it here).
	if _, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().ServiceAccounts("kube-system").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, p := range []*corev1.Pod{pod("kube-scheduler-cp2", "cp2", true), pod("not-static", "cp1", false)} {
		if _, err = pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	env := ctest.Start(t, &k8sctrl.StaticPodStatusController{Interval: 200 * time.Millisecond})

	kube := secrets.NewKubernetes()
	kube.TypedSpec().LocalhostAdminKubeconfig = kubeconfig

	nodename := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nodename.TypedSpec().Nodename = "cp1"

	env.Create(kube, nodename)

	ctest.AssertResource(env, "kube-system/kube-apiserver-cp1", func(r *k8s.StaticPodStatus, a *assert.Assertions) {
		a.Equal("Pending", r.TypedSpec().PodStatus["phase"])
	})

	// Only that one: not another node's mirror pod, not a pod that is not static.
	all, err := safe.StateListAll[*k8s.StaticPodStatus](ctx, env.State)
	if err != nil {
		t.Fatal(err)
	}

	if all.Len() != 1 {
		var ids []string
		for r := range all.All() {
			ids = append(ids, r.Metadata().ID())
		}

		t.Fatalf("static pod statuses %v, want only kube-system/kube-apiserver-cp1", ids)
	}
}
