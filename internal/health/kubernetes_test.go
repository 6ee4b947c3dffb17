package health_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/health"
	"github.com/talos-go/talos/internal/testenv"
)

// TestKubernetesChecks runs each check against a real kube-apiserver whose objects the test
// writes (nodes, control plane mirror pods, kube-proxy and CoreDNS with their status): each
// fails, naming what is missing, until the cluster state it looks for is there.
func TestKubernetesChecks(t *testing.T) {
	kubeconfig := testenv.StartAPIServer(t, "127.5.15.2")

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		t.Fatal(err)
	}

	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := testenv.Context(t, 2*time.Minute)

	checks, err := health.Kubernetes(cfg, health.Nodes{ControlPlanes: []string{"10.5.0.2"}, Workers: []string{"10.5.0.3"}})
	if err != nil {
		t.Fatal(err)
	}

	check := func(name string) func(context.Context) error {
		for _, c := range checks {
			if c.Name == name {
				return c.Run
			}
		}

		t.Fatalf("no check %q", name)

		return nil
	}

	// The API server takes a few seconds to come up: the first check waits for it.
	waitFails := func(name, want string) {
		t.Helper()

		err := health.Run(ctx, []health.Check{{Name: "the API", Run: func(ctx context.Context) error {
			err := check(name)(ctx)
			if err != nil && strings.Contains(err.Error(), want) {
				return nil
			}

			if err == nil {
				t.Fatalf("%s passed, want an error with %q", name, want)
			}

			return err
		}}}, 200*time.Millisecond, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
	}

	passes := func(name string) {
		t.Helper()

		if err := check(name)(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	waitFails("all k8s nodes to report", "nodes not registered yet: 10.5.0.2, 10.5.0.3")

	for name, addr := range map[string]string{"cp": "10.5.0.2", "w": "10.5.0.3"} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}

		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
		if _, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	passes("all k8s nodes to report")
	waitFails("all k8s nodes to report ready", "nodes not ready: cp, w")

	for _, name := range []string{"cp", "w"} {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	passes("all k8s nodes to report ready")
	waitFails("all control plane static pods to be running", "cp/kube-apiserver: no pod")

	// The API server makes kube-system itself, a moment after it serves.
	testenv.WaitFor(t, "the kube-system namespace", time.Minute, func() error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})

		return err
	})

	if _, err = cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		p, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: component + "-cp", Labels: map[string]string{"tier": "control-plane", "k8s-app": component}},
			Spec:       corev1.PodSpec{NodeName: "cp", Containers: []corev1.Container{{Name: component, Image: "registry.k8s.io/" + component + ":v1.34.0"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}

		p.Status.Phase = corev1.PodRunning
		if component != "kube-scheduler" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}

		if _, err = cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	passes("all control plane static pods to be running")
	waitFails("all control plane components to be ready", "cp/kube-scheduler: not ready")

	// A control plane whose config disables the scheduler is not waited for on it.
	disabled := health.DisabledComponents(&v1alpha1.Config{MachineConfig: &v1alpha1.MachineConfig{MachineControlPlane: &v1alpha1.MachineControlPlaneConfig{
		MachineScheduler: &v1alpha1.MachineSchedulerConfig{MachineSchedulerDisabled: new(true)},
	}}})
	if want := []string{"kube-scheduler"}; !slices.Equal(disabled, want) {
		t.Fatalf("DisabledComponents = %v, want %v", disabled, want)
	}

	withoutScheduler, err := health.Kubernetes(cfg, health.Nodes{ControlPlanes: []string{"10.5.0.2"}, Workers: []string{"10.5.0.3"}, Disabled: disabled})
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range withoutScheduler {
		if c.Name == "all control plane components to be ready" {
			if err = c.Run(ctx); err != nil {
				t.Fatalf("with kube-scheduler disabled: %v", err)
			}
		}
	}

	// Neither kube-proxy nor CoreDNS deployed (both disabled in the config): nothing to wait for.
	passes("kube-proxy to report ready")
	passes("coredns to report ready")

	labels := map[string]string{"k8s-app": "kube-proxy"}

	ds, err := cs.AppsV1().DaemonSets("kube-system").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "p", Image: "p"}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ds.Status.DesiredNumberScheduled, ds.Status.NumberReady = 2, 1
	if _, err = cs.AppsV1().DaemonSets("kube-system").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitFails("kube-proxy to report ready", "kube-proxy: 1 of 2 pods ready")

	n, err := cs.CoreV1().Nodes().Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	n.Spec.Unschedulable = true
	if _, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitFails("all k8s nodes to report schedulable", "nodes not schedulable: w")
}

// TestRunReportsAndStops: Run reports each check's progress as upstream's lines and stops at
// the first check that does not pass in time, naming it.
func TestRunReportsAndStops(t *testing.T) {
	var lines []string

	tries := 0
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()

	err := health.Run(ctx, []health.Check{
		{Name: "a", Run: func(context.Context) error {
			if tries++; tries < 3 {
				return errTest("not yet")
			}

			return nil
		}},
		{Name: "b", Run: func(context.Context) error { return errTest("never") }},
		{Name: "c", Run: func(context.Context) error { t.Fatal("c ran after b failed"); return nil }},
	}, time.Millisecond, func(l string) { lines = append(lines, l) })

	if err == nil || !strings.Contains(err.Error(), "waiting for b") || !strings.Contains(err.Error(), "never") {
		t.Fatalf("want an error naming b and its last error, got %v", err)
	}

	got := strings.Join(lines, "\n")
	for _, want := range []string{"waiting for a\nwaiting for a: not yet\nwaiting for a: OK", "waiting for b\nwaiting for b: never"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%s", want, got)
		}
	}

	if tries != 3 {
		t.Errorf("a ran %d times, want 3", tries)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
