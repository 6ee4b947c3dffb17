package container

// Kubernetes on the container cluster, when the node image carries it (`make rootfs`): every
// node Ready, a Deployment on the worker reached from a pod on the control plane through its
// Service name (CoreDNS, kube-proxy and flannel across nodes), logs and exec, and a crashed
// kube-apiserver brought back. These run first (go runs a package's files in name order):
// cluster_test.go ends with a reboot, a reset and the destroy.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/talos-go/talos/internal/images"
	"github.com/talos-go/talos/internal/machined/hostdns"
	"github.com/talos-go/talos/internal/testenv"
)

// ns is the suite's namespace.
const ns = "e2e"

// kube returns a client from the control plane's admin kubeconfig (`talosctl kubeconfig`), or
// skips when the node image carries no Kubernetes.
func kube(t *testing.T) (*kubernetes.Clientset, *rest.Config) {
	t.Helper()

	if out := must(t, "-n", cp, "services"); !strings.Contains(out, "kubelet") {
		t.Skip("the node image carries no Kubernetes (built with KUBERNETES=0): no kubelet on the nodes")
	}

	path := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, "-n", cp, "kubeconfig", path)

	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}

	cfg.WarningHandler = rest.NoWarnings{} // Pod Security's advice on the probe pods

	return kubernetes.NewForConfigOrDie(cfg), cfg
}

// cluster.extraManifests: the control plane fetched the suite's manifest and applied it.
func TestExtraManifestApplied(t *testing.T) {
	cs, _ := kube(t)
	ctx := testenv.Context(t, 3*time.Minute)

	testenv.WaitFor(t, "the extra manifest's ConfigMap", 2*time.Minute, func() error {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "from-extra-manifest", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if cm.Data["served-by"] != "the e2e suite" {
			return fmt.Errorf("data %v", cm.Data)
		}

		return nil
	})
}

func TestKubernetesNodesReady(t *testing.T) {
	cs, _ := kube(t)
	ctx := testenv.Context(t, 5*time.Minute)

	testenv.WaitFor(t, "both nodes Ready", 4*time.Minute, func() error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}

		ready := 0

		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}

		if len(nodes.Items) != 2 || ready != 2 {
			return fmt.Errorf("%d nodes, %d Ready", len(nodes.Items), ready)
		}

		return nil
	})

	// The health check sees the same from the node (server side) and from here.
	for _, server := range []string{"--server=true", "--server=false"} {
		_, errOut, code := talosctl(t, "-n", cp, "health", server, "--wait-timeout", "4m",
			"--control-plane-nodes", cp, "--worker-nodes", w)
		if code != 0 || !strings.Contains(errOut, "coredns to report ready: OK") || !strings.Contains(errOut, "all k8s nodes to report ready: OK") {
			t.Fatalf("health %s: exit %d\n%s", server, code, errOut)
		}
	}
}

// waitNodeReady waits until the Node name reports Ready from a kubelet that ran after the
// reboot: a status sent after before (taken before the reboot: a kubelet sends one when it
// starts, then only on a change or every 5 minutes, so the new kubelet's may precede the
// moment the node answered again) and a lease renewed after back (when the node answered: the
// old kubelet was gone by then; kubelet renews it every 10 s). On a timeout it logs the node's
// kubelet service and its last log lines.
func waitNodeReady(t *testing.T, cs kubernetes.Interface, name, node string, before, back time.Time, timeout time.Duration) {
	t.Helper()

	defer func() {
		if t.Failed() {
			out, errOut, _ := talosctl(t, "-n", node, "service", "kubelet")
			logs, logsErr, _ := talosctl(t, "-n", node, "logs", "kubelet", "--tail", "40")
			t.Logf("kubelet on %s:\n%s%s\n%s%s", node, out, errOut, logs, logsErr)
		}
	}()

	testenv.WaitFor(t, "Node "+name+" Ready", timeout, func() error {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
		if i < 0 {
			return errors.New("no Ready condition")
		}

		switch c := n.Status.Conditions[i]; {
		case c.Status != corev1.ConditionTrue:
			return fmt.Errorf("Ready is %s: %s", c.Status, c.Message)
		case c.LastHeartbeatTime.Time.Before(before.Truncate(time.Second)):
			return fmt.Errorf("no status from its kubelet since %s", before.Format(time.TimeOnly))
		}

		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		if r := lease.Spec.RenewTime; r == nil || r.Time.Before(back.Truncate(time.Second)) {
			return fmt.Errorf("its lease not renewed since %s", back.Format(time.TimeOnly))
		}

		return nil
	})
}

// putProbe puts the probe binary (a static Go program of this suite) on each node's /var, for
// pods to run from a hostPath: nothing is pulled from a registry.
func putProbe(t *testing.T) {
	t.Helper()

	probeOnce.Do(func() { placeProbe(t) })
}

// probeOnce: the probe is placed once; a second write would fail on the nodes where pods run it
// (text file busy).
var probeOnce sync.Once

func placeProbe(t *testing.T) {
	t.Helper()

	bin := filepath.Join(binDir, "probe")
	if out, err := testenv.GoBuild("-o", bin, "github.com/talos-go/talos/internal/e2e/container/probe"); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}

	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}

	for _, node := range []string{clusterName + "-controlplane-1", clusterName + "-worker-1"} {
		dir := filepath.Join("/proc", nodeInitPID(t, node), "root", "var", "lib", "e2e-probe")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(filepath.Join(dir, "probe"), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// probePod runs the probe with args in a pause image container on the given node.
func probePod(name string, labels map[string]string, node string, args ...string) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector: map[string]string{"kubernetes.io/hostname": node},
		// The control plane's taint only: a pod tolerating every taint tolerates a cordon's
		// too, and a drain's evicted pods came straight back to the node (the graceful reset
		// of TestResetToMaintenance then waited out its drain).
		Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{
			Name:         name,
			Image:        "registry.k8s.io/pause:3.10",
			Command:      append([]string{"/probe/probe"}, args...),
			VolumeMounts: []corev1.VolumeMount{{Name: "probe", MountPath: "/probe", ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "probe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/e2e-probe"}}}},
	}
}

// cluster create merged the cluster's admin kubeconfig into the user's default one, as upstream.
func TestKubeconfigMerged(t *testing.T) {
	kube(t) // skips without Kubernetes

	data, err := os.ReadFile(filepath.Join(home, ".kube", "config"))
	if err != nil || !strings.Contains(string(data), "admin@"+clusterName) {
		t.Fatalf("~/.kube/config after cluster create (%v):\n%s", err, data)
	}
}

func TestKubernetesServiceAcrossNodes(t *testing.T) {
	cs, cfg := kube(t)
	ctx := testenv.Context(t, 6*time.Minute)

	putProbe(t)

	// The probe runs from a hostPath, which the cluster's default Pod Security level
	// (baseline, as upstream's admission config) refuses: the suite's namespace is privileged.
	ensureNamespace(ctx, t, cs)

	labels := map[string]string{"app": "web"}
	replicas := int32(1)

	_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       probePod("web", labels, clusterName+"-worker-1", "serve", ":8080"),
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if _, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The namespace's default service account comes from the controller manager, a moment later.
	testenv.WaitFor(t, "the namespace's default service account", time.Minute, func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})

		return err
	})

	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"}, Spec: probePod("client", nil, clusterName+"-controlplane-1", "sleep")}
	if _, err = cs.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var webPod string

	testenv.WaitFor(t, "web on the worker and client on the control plane running", 4*time.Minute, func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}

		running := map[string]string{}

		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running[p.Labels["app"]+"/"+p.Name] = p.Spec.NodeName
			}

			if p.Labels["app"] == "web" {
				webPod = p.Name
			}
		}

		if running["/client"] != clusterName+"-controlplane-1" || running["web/"+webPod] != clusterName+"-worker-1" {
			return fmt.Errorf("running pods (name: node): %v", running)
		}

		return nil
	})

	// From the control plane's pod to the worker's, by the Service's DNS name (CoreDNS),
	// through its ClusterIP (kube-proxy) and the pod network (flannel's VXLAN between nodes).
	var body string

	testenv.WaitFor(t, "the web Service answering the client pod", 2*time.Minute, func() error {
		out, err := execIn(ctx, cs, cfg, "client", "/probe/probe", "get", "http://web."+ns+".svc.cluster.local:8080/")
		if err != nil {
			return err
		}

		body = out

		return nil
	})

	if !strings.HasPrefix(body, "probe "+webPod) {
		t.Fatalf("the client got %q, want the web pod's name %s", body, webPod)
	}

	// kubectl logs: the web pod logged the request.
	logs, err := cs.CoreV1().Pods(ns).GetLogs(webPod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !bytes.Contains(logs, []byte("request GET /")) {
		t.Fatalf("web's logs (%v):\n%s", err, logs)
	}
}

// execIn runs a command in a pod's first container, as `kubectl exec` does, and returns its
// output; a failed command's error carries its stderr.
func execIn(ctx context.Context, cs *kubernetes.Clientset, cfg *rest.Config, pod string, cmd ...string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)

	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}

	var stdout, stderr bytes.Buffer

	if err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return "", fmt.Errorf("%w: %s", err, stderr.String())
	}

	return stdout.String(), nil
}

// The host DNS (machine.features.hostDNS with forwardKubeDNSToHost, on in generated configs):
// the nodes resolve through 127.0.0.53, and a pod's lookup of a name outside the cluster goes
// to CoreDNS, then to the host DNS on 169.254.116.108, then to the node's resolver: here a DNS
// server the suite runs on the bridge's address, which the nodes name as their resolver.
func TestHostDNS(t *testing.T) {
	for _, node := range []string{cp, w} {
		if out := must(t, "-n", node, "read", "/etc/resolv.conf"); strings.TrimSpace(out) != "nameserver 127.0.0.53" {
			t.Fatalf("%s's /etc/resolv.conf:\n%s", node, out)
		}

		if out := must(t, "-n", node, "get", "dnsupstreams"); !strings.Contains(out, "10.5.0.1:53") {
			t.Fatalf("%s's DNS upstreams:\n%s", node, out)
		}

		if out := must(t, "-n", node, "get", "hostdnsconfig", "-o", "yaml"); !strings.Contains(out, "- 169.254.116.108:53") {
			t.Fatalf("%s's host DNS config:\n%s", node, out)
		}
	}

	if out := must(t, "-n", w, "logs", "dns-resolve-cache"); !strings.Contains(out, "host DNS listening") {
		t.Fatalf("the host DNS's log:\n%s", out)
	}

	cs, cfg := kube(t)
	ctx := testenv.Context(t, 4*time.Minute)

	var queries atomic.Int32

	resolver, err := hostdns.Listen(netip.MustParseAddrPort("10.5.0.1:53"), dns.HandlerFunc(func(rw dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)

		if q := req.Question[0]; q.Name == "outside.e2e.test." {
			queries.Add(1)

			if q.Qtype == dns.TypeA {
				m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(192, 0, 2, 55)}}
			}
		}

		rw.WriteMsg(m)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer resolver.Close()

	putProbe(t)
	ensureNamespace(ctx, t, cs)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "resolver"}, Spec: probePod("resolver", nil, clusterName+"-worker-1", "sleep")}
	if _, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "the resolver pod running", 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "resolver", metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case p.Status.Phase != corev1.PodRunning:
			return fmt.Errorf("pod %s", p.Status.Phase)
		}

		return nil
	})

	var got string

	testenv.WaitFor(t, "outside.e2e.test resolved in a pod", 2*time.Minute, func() error {
		out, err := execIn(ctx, cs, cfg, "resolver", "/probe/probe", "resolve", "outside.e2e.test")
		got = strings.TrimSpace(out)

		return err
	})

	if got != "192.0.2.55" || queries.Load() == 0 {
		t.Fatalf("the pod resolved outside.e2e.test to %q; the node's resolver got %d queries for it", got, queries.Load())
	}
}

// ensureNamespace makes the suite's namespace, privileged (the probe runs from a hostPath),
// unless a test before made it.
func ensureNamespace(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()

	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// A kube-apiserver killed with SIGKILL is started again (kubelet runs the static pod that
// machined serves it) and the API answers again.
func TestKubeAPIServerCrashRecovers(t *testing.T) {
	cs, _ := kube(t)
	ctx := testenv.Context(t, 5*time.Minute)

	restarts := func() (int32, error) {
		p, err := cs.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-"+clusterName+"-controlplane-1", metav1.GetOptions{})
		if err != nil {
			return 0, err
		}

		for _, s := range p.Status.ContainerStatuses {
			return s.RestartCount, nil
		}

		return 0, errors.New("no container status")
	}

	before, err := restarts()
	if err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command("pgrep", "-f", "kube-apiserver .*--advertise-address="+cp).Output()
	if err != nil {
		t.Fatalf("finding kube-apiserver: %v", err)
	}

	for _, pid := range strings.Fields(string(out)) {
		var p int
		if _, err = fmt.Sscan(pid, &p); err == nil {
			_ = syscall.Kill(p, syscall.SIGKILL) // it may be gone already
		}
	}

	testenv.WaitFor(t, "kube-apiserver restarted and answering", 4*time.Minute, func() error {
		n, err := restarts()
		if err != nil {
			return err
		}

		if n <= before {
			return fmt.Errorf("restart count %d, was %d", n, before)
		}

		return nil
	})
}

// upgrade-k8s as upstream's: to the version the cluster runs, a component whose image differs
// is updated and waited for, the others are found up to date on every node; to a version whose images no node has (nothing is pulled from the
// internet), it stops at the pre-pull and changes nothing; a downgrade is refused.
func TestUpgradeK8s(t *testing.T) {

	// The scheduler set to an image that does not exist: the upgrade brings it to the version's
	// image and waits for its static pod to run it.
	cs, _ := kube(t)
	missing := images.KubeScheduler + "-missing"
	must(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p", `{"cluster": {"scheduler": {"image": "`+missing+`"}}}`)

	testenv.WaitFor(t, "the scheduler's mirror pod on the missing image", 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods("kube-system").Get(t.Context(), "kube-scheduler-"+clusterName+"-controlplane-1", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if img := p.Spec.Containers[0].Image; img != missing {
			return fmt.Errorf("image %s", img)
		}

		return nil
	})

	out, errOut, code := talosctl(t, "-n", cp, "upgrade-k8s", "--to", images.KubernetesVersion)
	if code != 0 {
		t.Fatalf("upgrade-k8s to the running version: exit %d\n%s%s", code, out, errOut)
	}

	for _, want := range []string{
		"updating kube-scheduler: " + images.KubeScheduler + "-missing -> " + images.KubeScheduler,
		"kube-scheduler-" + clusterName + "-controlplane-1 is up to date",
		"kube-apiserver already runs " + images.KubeAPIServer,
		clusterName + "-worker-1: kubelet already runs " + images.Kubelet,
		clusterName + "-worker-1: " + images.KubeProxy + " is in the node's image store",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("upgrade-k8s output lacks %q:\n%s", want, out)
		}
	}

	config := func() string { return must(t, "-n", cp, "get", "machineconfig", "-o", "yaml") }
	before := config()

	out, errOut, code = talosctl(t, "-n", cp, "upgrade-k8s", "--to", "v1.34.99")
	if code == 0 || !strings.Contains(errOut, "cannot get registry.k8s.io/kube-apiserver:v1.34.99") || !strings.Contains(errOut, "nothing was changed") {
		t.Fatalf("upgrade-k8s to a version no node has: exit %d\n%s%s", code, out, errOut)
	}

	if after := config(); after != before {
		t.Fatalf("a refused upgrade changed the machine config:\n%s\n---\n%s", before, after)
	}

	if _, errOut, code = talosctl(t, "-n", cp, "upgrade-k8s", "--to", "v1.33.0"); code == 0 || !strings.Contains(errOut, "downgrades are not supported") {
		t.Fatalf("upgrade-k8s to an older version: exit %d\n%s", code, errOut)
	}
}

// TestConformanceSaysWhatIsMissing: `conformance kubernetes` starts upstream's conformance pod;
// the nodes here cannot reach registry.k8s.io, so it fails with the image and the node named,
// and deletes everything it created.
func TestConformanceSaysWhatIsMissing(t *testing.T) {
	cs, _ := kube(t)

	out, errOut, code := talosctl(t, "-n", cp, "conformance", "kubernetes", "--mode", "fast")
	if code == 0 || !strings.Contains(errOut, "cannot pull registry.k8s.io/conformance:"+images.KubernetesVersion) || !strings.Contains(errOut, "registry mirror") {
		t.Fatalf("conformance without registry access: exit %d\n%s%s", code, out, errOut)
	}

	if !strings.Contains(out, "conformance pass 1 of 2") || !strings.Contains(out, "deleting namespace conformance") {
		t.Errorf("conformance progress:\n%s", out)
	}

	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "conformance", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the conformance namespace is left: %v", err)
	}

	if _, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), "conformance-serviceaccount-role-binding", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the conformance role binding is left: %v", err)
	}

	if _, errOut, code = talosctl(t, "-n", cp, "conformance", "k8s", "--mode", "quick"); code == 0 || !strings.Contains(errOut, `unsupported conformance mode "quick"`) {
		t.Errorf("an unknown mode: exit %d\n%s", code, errOut)
	}

	// health --run-e2e: the cluster is healthy, then the quick e2e tests need the same image.
	out, errOut, code = talosctl(t, "-n", cp, "health", "--run-e2e", "--wait-timeout", "5m")
	if code == 0 || !strings.Contains(out, "Pods should be submitted and removed") || !strings.Contains(errOut, "cannot pull registry.k8s.io/conformance:") {
		t.Errorf("health --run-e2e without registry access: exit %d\n%s%s", code, out, errOut)
	}
}
