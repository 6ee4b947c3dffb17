package container

// machine.features.kubernetesTalosAPIAccess, as upstream: a talos.dev ServiceAccount in an
// allowed namespace asking for allowed roles gets a Secret holding a talosconfig whose
// certificate carries those roles. Named to run before cluster_test.go, whose tests reset and
// destroy the nodes.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-go/talos/internal/testenv"
)

var talosSAs = schema.GroupVersionResource{Group: "talos.dev", Version: "v1alpha1", Resource: "serviceaccounts"}

func talosSA(namespace, name string, roles ...string) *unstructured.Unstructured {
	rs := make([]any, 0, len(roles))
	for _, r := range roles {
		rs = append(rs, r)
	}

	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "talos.dev/v1alpha1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"roles": rs},
	}}
}

// TestKubernetesTalosAPIAccess: with the feature on the control plane (os:reader from
// kube-system), the CRD and the talos Service in default appear; an account asking os:reader
// in kube-system gets a Secret whose talosconfig, used from the test's host, reads the
// version and the services and is refused an os:admin call; an account asking os:admin, and
// one in default, get a failure reason and no Secret; deleting the account deletes its Secret.
func TestKubernetesTalosAPIAccess(t *testing.T) {
	cs, rc := kube(t)
	dyn := dynamic.NewForConfigOrDie(rc)
	ctx := t.Context()

	must(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		`{"machine":{"features":{"kubernetesTalosAPIAccess":{"enabled":true,"allowedRoles":["os:reader"],"allowedKubernetesNamespaces":["kube-system"]}}}}`)

	accounts := []*unstructured.Unstructured{
		talosSA("kube-system", "e2e-reader", "os:reader"),
		talosSA("kube-system", "e2e-admin", "os:reader", "os:admin"),
		talosSA("default", "e2e-elsewhere", "os:reader"),
	}

	t.Cleanup(func() {
		for _, sa := range accounts {
			dyn.Resource(talosSAs).Namespace(sa.GetNamespace()).Delete(context.Background(), sa.GetName(), metav1.DeleteOptions{}) // t.Context() is canceled by now
		}

		must(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p",
			`[{"op":"remove","path":"/machine/features/kubernetesTalosAPIAccess"}]`)
	})

	// The CRD is served once the controller made it and the API server established it.
	for _, sa := range accounts {
		testenv.WaitFor(t, "creating talos.dev ServiceAccount "+sa.GetNamespace()+"/"+sa.GetName(), 2*time.Minute, func() error {
			_, err := dyn.Resource(talosSAs).Namespace(sa.GetNamespace()).Create(ctx, sa, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}

			return err
		})
	}

	var data []byte

	testenv.WaitFor(t, "the Secret kube-system/e2e-reader", time.Minute, func() error {
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "e2e-reader", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if owner := metav1.GetControllerOf(s); owner == nil || owner.Kind != "ServiceAccount" || owner.APIVersion != "talos.dev/v1alpha1" || owner.Name != "e2e-reader" {
			return fmt.Errorf("controller %+v, want the talos.dev ServiceAccount", owner)
		}

		data = s.Data["config"]

		return nil
	})

	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		t.Fatalf("the Secret's config is no talosconfig: %v", err)
	}

	if c := cfg.Contexts[cfg.Context]; c == nil || !slices.Equal(c.Endpoints, []string{"talos.default"}) {
		t.Fatalf("talosconfig context %q: %+v, want endpoint talos.default", cfg.Context, c)
	}

	path := filepath.Join(t.TempDir(), "talosconfig")
	if err = os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	reader := cli()
	reader.TalosConfig = path

	if out := reader.Must(t, "-e", cp, "-n", cp, "version"); !strings.Contains(out, "Server:") {
		t.Fatalf("version with the account's talosconfig:\n%s", out)
	}

	if out := reader.Must(t, "-e", cp, "-n", cp, "services"); !strings.Contains(out, "apid") || !strings.Contains(out, "kubelet") {
		t.Fatalf("services with the account's talosconfig:\n%s", out)
	}

	dummy := filepath.Join(t.TempDir(), "config.yaml")
	if err = os.WriteFile(dummy, []byte("version: v1alpha1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if out, errOut, code := reader.Run(t, "-e", cp, "-n", cp, "apply-config", "--dry-run", "-f", dummy); code == 0 ||
		!strings.Contains(errOut, "PermissionDenied") && !strings.Contains(errOut, "requires role os:admin") {
		t.Fatalf("apply-config (os:admin) with an os:reader talosconfig: exit %d\n%s%s", code, out, errOut)
	} else {
		t.Logf("apply-config with the os:reader talosconfig refused: %s", strings.TrimSpace(errOut))
	}

	podReachesAPI(t, cs)

	// Refused accounts: a failure reason, no Secret.
	for _, tc := range []struct{ ns, name, reason, event string }{
		{"kube-system", "e2e-admin", "Roles not allowed: [os:admin]", "ErrRolesNotAllowed"},
		{"default", "e2e-elsewhere", "Namespace is not allowed: default", "ErrNamespaceNotAllowed"},
	} {
		testenv.WaitFor(t, "the failure reason of "+tc.ns+"/"+tc.name, time.Minute, func() error {
			sa, err := dyn.Resource(talosSAs).Namespace(tc.ns).Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				return err
			}

			if got, _, _ := unstructured.NestedString(sa.Object, "status", "failureReason"); got != tc.reason {
				return fmt.Errorf("status.failureReason %q, want %q", got, tc.reason)
			}

			return nil
		})

		if _, err := cs.CoreV1().Secrets(tc.ns).Get(ctx, tc.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Secret %s/%s of a refused account: %v", tc.ns, tc.name, err)
		}

		events, err := cs.CoreV1().Events(tc.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + tc.name})
		if err != nil {
			t.Fatal(err)
		}

		if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Reason == tc.event && e.Type == corev1.EventTypeWarning && e.Message == tc.reason
		}) {
			t.Fatalf("no Warning event %s on %s/%s: %+v", tc.event, tc.ns, tc.name, events.Items)
		}
	}

	// The talos Service in default, on the control plane's apid.
	svc, err := cs.CoreV1().Services("default").Get(ctx, "talos", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 50000 {
		t.Fatalf("Service default/talos: %+v (%v)", svc, err)
	}

	testenv.WaitFor(t, "the talos Service's endpoints on the control plane", time.Minute, func() error {
		eps, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "talos", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if eps.Labels["kubernetes.io/service-name"] != "talos" ||
			!slices.ContainsFunc(eps.Endpoints, func(e discoveryv1.Endpoint) bool { return slices.Contains(e.Addresses, cp) }) {
			return fmt.Errorf("labels %v, endpoints %+v", eps.Labels, eps.Endpoints)
		}

		return nil
	})

	if err = dyn.Resource(talosSAs).Namespace("kube-system").Delete(ctx, "e2e-reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "the Secret kube-system/e2e-reader deleted with its account", time.Minute, func() error {
		if _, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "e2e-reader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w)", err)
		}

		return nil
	})
}

// podReachesAPI runs talosctl in a pod in kube-system on the control plane, with the Secret
// mounted where upstream's guide mounts it, against the talosconfig's endpoint talos.default:
// cluster DNS, the talos Service and its EndpointSlice to the control plane's apid.
func podReachesAPI(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()

	ctx := t.Context()
	cpNode := clusterName + "-controlplane-1"

	// The pause image has no libc: a static talosctl.
	bin := filepath.Join(t.TempDir(), "talosctl")
	if out, err := testenv.GoBuild("-tags", "netgo,osusergo", "-trimpath", "-ldflags=-s", "-o", bin, "github.com/talos-go/talos/cmd/talosctl"); err != nil {
		t.Fatalf("building a static talosctl: %v\n%s", err, out)
	}

	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join("/proc", nodeInitPID(t, cpNode), "root", "var", "lib", "e2e-talosctl")
	if err = os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	if err = os.WriteFile(filepath.Join(dir, "talosctl"), data, 0o755); err != nil {
		t.Fatal(err)
	}

	pods := cs.CoreV1().Pods("kube-system")
	name := "e2e-talos-api-access"

	t.Cleanup(func() { pods.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	if _, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{"kubernetes.io/hostname": cpNode},
			Tolerations:   []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    "talosctl",
				Image:   "registry.k8s.io/pause:3.10",
				Command: []string{"/t/talosctl", "--talosconfig", "/var/run/secrets/talos.dev/config", "-n", cp, "version"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "t", MountPath: "/t", ReadOnly: true},
					{Name: "talos-secrets", MountPath: "/var/run/secrets/talos.dev", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "t", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/e2e-talosctl"}}},
				{Name: "talos-secrets", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "e2e-reader"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var phase corev1.PodPhase

	testenv.WaitFor(t, "the talosctl pod to finish", 2*time.Minute, func() error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		if phase = p.Status.Phase; phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}

		return nil
	})

	logs, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if phase != corev1.PodSucceeded || !strings.Contains(string(logs), "Server:") {
		t.Fatalf("talosctl version from a pod through talos.default: %s\n%s", phase, logs)
	}

	t.Logf("talosctl version from a pod in kube-system through talos.default:\n%s", logs)
}
