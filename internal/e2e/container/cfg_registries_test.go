package container

// Workload images through machine.registries mirrors with credentials: a registry of the
// suite's (go-containerregistry's, TLS and basic auth) on the bridge holds an image of the
// probe; pods on the worker name it under another registry name, mirrored to it.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/talos-go/talos/internal/registry"
	"github.com/talos-go/talos/internal/testenv"
)

// Two mirrors with credentials, both to the suite's registry (its two listeners: CRI keys
// credentials by host:port): the one with the right password gives a running pod; the one
// with a wrong password gives the pod a pull error naming the 401, and the node stays well.
// Credentials reach CRI when containerd starts, so their change needs a reboot, and says so.
func TestPodPullsThroughMirrorWithAuth(t *testing.T) {
	cs, _ := kube(t)
	ctx := testenv.Context(t, 15*time.Minute)

	caPEM, crtPEM, keyPEM, err := registry.ServerCert("10.5.0.1")
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	const user, password = "e2e", "the-right-password"

	var hosts []string

	for range 2 {
		r, err := registry.Start(registry.Options{Addr: "10.5.0.1:0", Cert: &cert, Users: map[string]string{user: password}, BlobDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { r.Close() })

		hosts = append(hosts, r.Host)
	}

	// The image: the suite's static probe, sleeping.
	bin := filepath.Join(t.TempDir(), "probe")
	if out, err := testenv.GoBuild("-o", bin, "github.com/talos-go/talos/internal/e2e/container/probe"); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}

	probe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}

	img, err := registry.Image(map[string][]byte{"probe": probe}, "/probe", "sleep")
	if err != nil {
		t.Fatal(err)
	}

	for _, h := range hosts {
		if err = (registry.Client{Username: user, Password: password, CA: caPEM}).Push(ctx, h+"/e2e/probe:v1", img); err != nil {
			t.Fatal(err)
		}
	}

	good, bad := "private.e2e.test", "wrongpass.e2e.test"

	patch, err := json.Marshal(map[string]any{"machine": map[string]any{"registries": map[string]any{
		"mirrors": map[string]any{
			good: map[string]any{"endpoints": []string{"https://" + hosts[0]}},
			bad:  map[string]any{"endpoints": []string{"https://" + hosts[1]}},
		},
		"config": map[string]any{
			hosts[0]: map[string]any{"tls": map[string]any{"ca": caPEM}, "auth": map[string]any{"username": user, "password": password}},
			hosts[1]: map[string]any{"tls": map[string]any{"ca": caPEM}, "auth": map[string]any{"username": user, "password": "a-wrong-password"}},
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}

	_, errOut, code := talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p", string(patch))
	if code == 0 || !strings.Contains(errOut, "machine.registries.config.*.auth") || !strings.Contains(errOut, "cannot be applied without a reboot") {
		t.Fatalf("credentials without a reboot: exit %d, %s", code, errOut)
	}

	must(t, "-n", w, "patch", "machineconfig", "--mode", "staged", "-p", string(patch))

	id, before := bootID(t, w), time.Now()
	must(t, "-n", w, "reboot", "--wait=false")

	testenv.WaitFor(t, w+" back", 5*time.Minute, func() error {
		if after, _, code := talosctl(t, "-n", w, "read", "/proc/sys/kernel/random/boot_id"); code != 0 || strings.TrimSpace(after) == id {
			return fmt.Errorf("boot id %q (exit %d)", strings.TrimSpace(after), code)
		}

		return nil
	})

	worker := clusterName + "-worker-1"
	waitNodeReady(t, cs, worker, w, before, time.Now(), 5*time.Minute)
	ensureNamespace(ctx, t, cs)

	pod := func(name, image string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": worker},
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "probe", Image: image, ImagePullPolicy: corev1.PullAlways}},
		}}
	}

	for _, name := range []string{"pull-auth", "pull-wrong-password"} {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // t.Context is canceled by now
			defer cancel()

			cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}) // best effort: the namespace goes with the cluster
		})
	}

	start := time.Now()

	if _, err = cs.CoreV1().Pods(ns).Create(ctx, pod("pull-auth", good+"/e2e/probe:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err = cs.CoreV1().Pods(ns).Create(ctx, pod("pull-wrong-password", bad+"/e2e/probe:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "pod pull-auth running", 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "pull-auth", metav1.GetOptions{})
		if err != nil {
			return err
		}

		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running != nil {
				return nil
			}

			if s.State.Waiting != nil {
				return fmt.Errorf("waiting: %s %s", s.State.Waiting.Reason, s.State.Waiting.Message)
			}
		}

		return fmt.Errorf("phase %s", p.Status.Phase)
	})

	t.Logf("pod created to running, through the mirror with basic auth: %s", time.Since(start).Round(time.Millisecond))

	// The kubelet's own measure of the pull.
	if events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "pull-auth").String()}); err == nil {
		for _, e := range events.Items {
			if e.Reason == "Pulled" {
				t.Logf("kubelet: %s", e.Message)
			}
		}
	}

	// The wrong password: the pull fails, the kubelet's event says the registry refused it.
	testenv.WaitFor(t, "pod pull-wrong-password's pull error", 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "pull-wrong-password", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		}

		if r := p.Status.ContainerStatuses[0].State.Waiting.Reason; r != "ErrImagePull" && r != "ImagePullBackOff" {
			return fmt.Errorf("waiting for %s", r)
		}

		events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "pull-wrong-password").String()})
		if err != nil {
			return err
		}

		var msgs []string

		for _, e := range events.Items {
			if e.Reason == "Failed" && strings.Contains(e.Message, "401 Unauthorized") && strings.Contains(e.Message, hosts[1]) {
				t.Logf("the wrong password's event: %s", e.Message)

				return nil
			}

			msgs = append(msgs, e.Reason+": "+e.Message)
		}

		return fmt.Errorf("no Failed event naming the 401 of %s: %q", hosts[1], msgs)
	})

	// The node is fine: its services run, it is Ready, the other pod still runs.
	for _, svc := range []string{"containerd", "kubelet"} {
		if out := must(t, "-n", w, "service", svc); !strings.Contains(out, "Running") {
			t.Fatalf("%s on the worker:\n%s", svc, out)
		}
	}

	waitNodeReady(t, cs, worker, w, before, time.Now(), time.Minute)

	if p, err := cs.CoreV1().Pods(ns).Get(ctx, "pull-auth", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod pull-auth after the failed pull: %v %v", p.Status.Phase, err)
	}
}
