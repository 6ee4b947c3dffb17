package k8s_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/testenv"
)

// TestStaticPodProbesAnswer: each liveness probe of the control plane's static pods names a path
// the real component serves. kube-controller-manager has no /livez: probed there, kubelet
// killed it every ~90 s.
func TestStaticPodProbesAnswer(t *testing.T) {
	const host = "127.5.14.5"

	dir := t.TempDir()
	env := staticPodEnv(t, &k8sctrl.StaticPodController{SecretsDir: filepath.Join(dir, "secrets"), ConfigDir: filepath.Join(dir, "config"), AuditLogDir: filepath.Join(dir, "audit")})
	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane))...)

	type probe struct {
		path string
		port int64
	}

	probes := map[string]probe{}

	for _, id := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		ctest.AssertResource(env, id, func(r *k8s.StaticPod, a *assert.Assertions) {
			get, _ := container(r.TypedSpec().Pod)["livenessProbe"].(map[string]any)["httpGet"].(map[string]any)
			if a.NotNil(get, "%s has no liveness probe", id) {
				probes[id] = probe{get["path"].(string), get["port"].(int64)}
			}
		})
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	testenv.WriteFile(t, kubeconfig, testenv.StartAPIServer(t, host), 0o600)

	kube := testenv.KubeBinary(t)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // a probe, as kubelet's: no verification

	for id, p := range probes {
		url := fmt.Sprintf("https://%s:%d%s", host, p.port, p.path)

		// StartAPIServer's kube-apiserver is the one probed.
		if id != "kube-apiserver" {
			cmd := exec.Command(kube, id, "--kubeconfig="+kubeconfig, "--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
				"--bind-address="+host, fmt.Sprintf("--secure-port=%d", p.port), "--leader-elect=false", "--cert-dir="+filepath.Join(dir, id))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr

			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}

			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		}

		testenv.WaitFor(t, id+" answering its liveness probe "+url, 2*time.Minute, func() bool {
			resp, err := client.Get(url)
			if err != nil {
				return false
			}

			resp.Body.Close()

			if resp.StatusCode == http.StatusNotFound {
				t.Fatalf("%s answers its liveness probe %s with 404: kubelet would kill it", id, url)
			}

			return resp.StatusCode == http.StatusOK
		})
	}
}
