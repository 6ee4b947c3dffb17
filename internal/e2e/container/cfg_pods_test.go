package container

// machine.pods run on the node as static pods (kubelet's mirror pod <name>-<node> shows them)
// and follow the config; machine.seccompProfiles are files a Localhost-profile pod runs with.
// Named to run before cluster_test.go, whose tests reset and destroy the worker.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-go/talos/internal/testenv"
)

// patchWorker changes the worker's config without a reboot (a JSON patch).
func patchWorker(t *testing.T, patch string) {
	t.Helper()

	must(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p", patch)
}

// TestConfigStaticPodFollowsConfig: a pod of the worker's machine.pods runs there as a static
// pod (its mirror pod <name>-<node> is Running, marked as a mirror) and is published as
// upstream's StaticPod default-<name>; dropped from the config, it stops and its mirror pod
// goes, without a reboot.
func TestConfigStaticPodFollowsConfig(t *testing.T) {
	cs, _ := kube(t)
	worker := clusterName + "-worker-1"
	mirror := "e2e-static-" + worker

	t.Cleanup(func() { patchWorker(t, `[{"op":"add","path":"/machine/pods","value":[]}]`) })

	// The pause image is in the node image's store: nothing is pulled.
	patchWorker(t, `[{"op":"add","path":"/machine/pods","value":[{"apiVersion":"v1","kind":"Pod",`+
		`"metadata":{"name":"e2e-static","labels":{"app":"e2e-static"}},`+
		`"spec":{"containers":[{"name":"pause","image":"registry.k8s.io/pause:3.10"}]}}]}]`)

	staticPodListed(t, true)

	testenv.WaitFor(t, "the config pod's mirror pod running on the worker", 3*time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), mirror, metav1.GetOptions{})
		if err != nil {
			return err
		}

		if _, ok := p.Annotations["kubernetes.io/config.mirror"]; !ok {
			return fmt.Errorf("not a mirror pod: annotations %v", p.Annotations)
		}

		if p.Spec.NodeName != worker || p.Labels["app"] != "e2e-static" {
			return fmt.Errorf("on %q with labels %v", p.Spec.NodeName, p.Labels)
		}

		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}

		return nil
	})

	patchWorker(t, `[{"op":"remove","path":"/machine/pods"}]`)

	staticPodListed(t, false)

	testenv.WaitFor(t, "the mirror pod gone with the config pod", 3*time.Minute, func() error {
		_, err := cs.CoreV1().Pods("default").Get(t.Context(), mirror, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		default:
			return errors.New("still there")
		}
	})
}

// staticPodListed waits until the worker's `get staticpods` lists the config pod, or not.
func staticPodListed(t *testing.T, listed bool) {
	t.Helper()

	testenv.WaitFor(t, fmt.Sprintf("default-e2e-static listed by get staticpods: %v", listed), time.Minute, func() error {
		if out := must(t, "-n", w, "get", "staticpods"); strings.Contains(out, "default-e2e-static") != listed {
			return fmt.Errorf("get staticpods:\n%s", out)
		}

		return nil
	})
}

// denyMkdir allows every system call but mkdir and mkdirat, which fail with EPERM (errno 1).
const denyMkdir = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}`

// TestSeccompProfileFromConfig: a profile of the worker's machine.seccompProfiles is written to
// kubelet's profiles folder; a pod naming it (Localhost, profiles/<name>) cannot make a folder,
// the same pod without it can. Dropped from the config, the file goes.
func TestSeccompProfileFromConfig(t *testing.T) {
	cs, _ := kube(t)
	ensureNamespace(t.Context(), t, cs)
	putProbe(t)

	worker := clusterName + "-worker-1"
	file := filepath.Join("/proc", nodeInitPID(t, worker), "root", "var", "lib", "kubelet", "seccomp", "profiles", "e2e-deny-mkdir.json")

	t.Cleanup(func() { patchWorker(t, `[{"op":"add","path":"/machine/seccompProfiles","value":[]}]`) })

	patchWorker(t, `[{"op":"add","path":"/machine/seccompProfiles","value":[{"name":"e2e-deny-mkdir.json","value":`+denyMkdir+`}]}]`)

	testenv.WaitFor(t, "the profile's file on the worker", time.Minute, func() error {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}

		if !strings.Contains(string(data), `"mkdirat"`) {
			return fmt.Errorf("holds %s", data)
		}

		return nil
	})

	run := func(name string, profile *corev1.SeccompProfile) (corev1.PodPhase, string) {
		spec := probePod(name, nil, worker, "mkdir", "/e2e-made")
		spec.RestartPolicy = corev1.RestartPolicyNever
		spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: profile}

		pods := cs.CoreV1().Pods(ns)
		if _, err := pods.Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		// A finished pod left on the worker is still its pod: TestResetToMaintenance's drain
		// check sees it. t.Context() is canceled before cleanups run, so the delete gets its own.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			zero := int64(0)
			_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})

			testenv.WaitFor(t, name+" deleted", time.Minute, func() error {
				if _, err := pods.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("still there (%w)", err)
				}

				return nil
			})
		})

		var phase corev1.PodPhase

		testenv.WaitFor(t, name+" done", 2*time.Minute, func() error {
			p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}

			if phase = p.Status.Phase; phase != corev1.PodSucceeded && phase != corev1.PodFailed {
				return fmt.Errorf("phase %s", phase)
			}

			return nil
		})

		logs, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(t.Context())
		if err != nil {
			t.Fatalf("logs of %s: %v", name, err)
		}

		return phase, string(logs)
	}

	localhost := "profiles/e2e-deny-mkdir.json"

	phase, logs := run("e2e-seccomp-denied", &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &localhost})
	if phase != corev1.PodFailed || !strings.Contains(logs, "operation not permitted") {
		t.Errorf("with the config's profile: phase %s, log %q; want Failed with mkdir's EPERM", phase, logs)
	}

	phase, logs = run("e2e-seccomp-allowed", nil)
	if phase != corev1.PodSucceeded || !strings.Contains(logs, "mkdir ok") {
		t.Errorf("without it: phase %s, log %q; want Succeeded with mkdir ok", phase, logs)
	}

	patchWorker(t, `[{"op":"remove","path":"/machine/seccompProfiles"}]`)

	testenv.WaitFor(t, "the dropped profile's file gone", time.Minute, func() error {
		switch _, err := os.Stat(file); {
		case errors.Is(err, os.ErrNotExist):
			return nil
		case err != nil:
			return err
		default:
			return errors.New("still there")
		}
	})
}
