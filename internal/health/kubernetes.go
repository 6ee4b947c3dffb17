package health

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// controlPlaneComponents are the static pods every control plane runs (label k8s-app).
var controlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// DisabledComponents are the control plane components a control plane's config turns off
// (machine.controlPlane.controllerManager.disabled, scheduler.disabled), for Nodes.Disabled.
func DisabledComponents(cfg interface{ Machine() config.MachineConfig }) []string {
	if cfg == nil || cfg.Machine() == nil {
		return nil
	}

	var out []string

	cp := cfg.Machine().Controlplane() // machinery's accessors never return nil

	if cp.ControllerManager().Disabled() {
		out = append(out, "kube-controller-manager")
	}

	if cp.Scheduler().Disabled() {
		out = append(out, "kube-scheduler")
	}

	return out
}

// Kubernetes returns upstream's Kubernetes checks, in upstream's order, against the API server
// behind cfg: every expected node registered, the control plane's static pods running and
// ready, every node Ready, kube-proxy and CoreDNS ready (each skipped when not deployed, as
// with `proxy.disabled`), every node schedulable.
func Kubernetes(cfg *rest.Config, nodes Nodes) ([]Check, error) {
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}

	apps, err := appsv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}

	k := kube{core: core, apps: apps, nodes: nodes}

	return []Check{
		{"all k8s nodes to report", k.nodesReport},
		{"all control plane static pods to be running", func(ctx context.Context) error { return k.staticPods(ctx, false) }},
		{"all control plane components to be ready", func(ctx context.Context) error { return k.staticPods(ctx, true) }},
		{"all k8s nodes to report ready", k.nodesReady},
		{"kube-proxy to report ready", k.kubeProxy},
		{"coredns to report ready", k.coreDNS},
		{"all k8s nodes to report schedulable", k.nodesSchedulable},
	}, nil
}

// componentChecks is how many of Kubernetes's checks are about the control plane's components
// (nodes registered, static pods running and ready): upstream's checks when node readiness is
// skipped.
const componentChecks = 3

// ComponentsOnly keeps the checks of the control plane's components from Kubernetes's list, as
// upstream's --skip-k8s-node-readiness-check does: nodes need not be Ready, nor the pods that
// wait for them (kube-proxy, CoreDNS).
func ComponentsOnly(checks []Check) []Check { return checks[:min(componentChecks, len(checks))] }

type kube struct {
	core  corev1client.CoreV1Interface
	apps  appsv1client.AppsV1Interface
	nodes Nodes
}

// byAddress lists the registered nodes by each of their addresses.
func (k kube) byAddress(ctx context.Context) (map[string]*corev1.Node, error) {
	list, err := k.core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}

	out := map[string]*corev1.Node{}

	for i := range list.Items {
		for _, a := range list.Items[i].Status.Addresses {
			out[a.Address] = &list.Items[i]
		}
	}

	return out, nil
}

// expected returns the registered node of each expected address, failing with the addresses
// that have none.
func (k kube) expected(ctx context.Context, addrs []string) ([]*corev1.Node, error) {
	known, err := k.byAddress(ctx)
	if err != nil {
		return nil, err
	}

	var (
		found   []*corev1.Node
		missing []string
	)

	for _, a := range addrs {
		if n, ok := known[a]; ok {
			found = append(found, n)
		} else {
			missing = append(missing, a)
		}
	}

	if len(missing) > 0 {
		return nil, fmt.Errorf("nodes not registered yet: %s", strings.Join(missing, ", "))
	}

	return found, nil
}

func (k kube) nodesReport(ctx context.Context) error {
	_, err := k.expected(ctx, k.nodes.All())

	return err
}

func (k kube) nodesReady(ctx context.Context) error {
	nodes, err := k.expected(ctx, k.nodes.All())
	if err != nil {
		return err
	}

	var notReady []string

	for _, n := range nodes {
		if !nodeReady(n) {
			notReady = append(notReady, n.Name)
		}
	}

	if len(notReady) > 0 {
		return fmt.Errorf("nodes not ready: %s", strings.Join(notReady, ", "))
	}

	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func (k kube) nodesSchedulable(ctx context.Context) error {
	nodes, err := k.expected(ctx, k.nodes.All())
	if err != nil {
		return err
	}

	var cordoned []string

	for _, n := range nodes {
		if n.Spec.Unschedulable {
			cordoned = append(cordoned, n.Name)
		}
	}

	if len(cordoned) > 0 {
		return fmt.Errorf("nodes not schedulable: %s", strings.Join(cordoned, ", "))
	}

	return nil
}

// staticPods checks every control plane node's kube-apiserver, kube-controller-manager and
// kube-scheduler mirror pods (less the disabled ones): running, and with ready also Ready.
func (k kube) staticPods(ctx context.Context, ready bool) error {
	nodes, err := k.expected(ctx, k.nodes.ControlPlanes)
	if err != nil {
		return err
	}

	pods, err := k.core.Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "tier=control-plane"})
	if err != nil {
		return err
	}

	var bad []string

	for _, n := range nodes {
		for _, component := range controlPlaneComponents {
			if slices.Contains(k.nodes.Disabled, component) {
				continue
			}

			i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool {
				return p.Spec.NodeName == n.Name && p.Labels["k8s-app"] == component
			})

			switch {
			case i < 0:
				bad = append(bad, fmt.Sprintf("%s/%s: no pod", n.Name, component))
			case pods.Items[i].Status.Phase != corev1.PodRunning:
				bad = append(bad, fmt.Sprintf("%s/%s: %s", n.Name, component, pods.Items[i].Status.Phase))
			case ready && !podReady(&pods.Items[i]):
				bad = append(bad, fmt.Sprintf("%s/%s: not ready", n.Name, component))
			}
		}
	}

	if len(bad) > 0 {
		return fmt.Errorf("control plane pods: %s", strings.Join(bad, ", "))
	}

	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func (k kube) kubeProxy(ctx context.Context) error {
	ds, err := k.apps.DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // proxy disabled in the config
	}

	if err != nil {
		return err
	}

	if s := ds.Status; s.DesiredNumberScheduled == 0 || s.NumberReady != s.DesiredNumberScheduled {
		return fmt.Errorf("kube-proxy: %d of %d pods ready", s.NumberReady, s.DesiredNumberScheduled)
	}

	return nil
}

func (k kube) coreDNS(ctx context.Context) error {
	d, err := k.apps.Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // CoreDNS disabled in the config
	}

	if err != nil {
		return err
	}

	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}

	if d.Status.ReadyReplicas < want {
		return fmt.Errorf("coredns: %d of %d replicas ready", d.Status.ReadyReplicas, want)
	}

	return nil
}
