package k8s_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

func container(pod map[string]any) map[string]any {
	return pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
}

func command(pod map[string]any) []string {
	var out []string
	for _, a := range container(pod)["command"].([]any) {
		out = append(out, a.(string))
	}

	return out
}

// TestStaticPods: a control plane's three static pods carry upstream's arguments, the local
// etcd, the config's extra arguments and volumes, and the config files are written.
func TestStaticPods(t *testing.T) {
	dir := t.TempDir()
	ctrl := &k8sctrl.StaticPodController{SecretsDir: filepath.Join(dir, "secrets"), ConfigDir: filepath.Join(dir, "config"), AuditLogDir: filepath.Join(dir, "audit")}

	env := staticPodEnv(t, ctrl)

	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.APIServerConfig.ExtraArgsConfig = map[string]string{"tls-min-version": "VersionTLS12", "v": "3"}
		c.ClusterConfig.APIServerConfig.ContainerImage = "example.org/apiserver:v1.34.0-custom"
		c.ClusterConfig.SchedulerConfig.ExtraVolumesConfig = []v1alpha1.VolumeMountConfig{{VolumeHostPath: "/var/lib/sched", VolumeMountPath: "/sched", VolumeReadOnly: true}}
	}))...)

	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver", "kube-controller-manager", "kube-scheduler")

	ctest.AssertResource(env, "kube-apiserver", func(r *k8s.StaticPod, a *assert.Assertions) {
		pod := r.TypedSpec().Pod
		args := command(pod)
		a.Equal("/usr/local/bin/kube-apiserver", args[0])
		a.Contains(args, "--etcd-servers=https://localhost:2379")
		a.Contains(args, "--etcd-certfile=/system/secrets/kubernetes/kube-apiserver/etcd-client.crt")
		a.Contains(args, "--tls-cert-file=/system/secrets/kubernetes/kube-apiserver/apiserver.crt")
		a.Contains(args, "--service-cluster-ip-range=10.96.0.0/12")
		a.Contains(args, "--secure-port=6443")
		a.Contains(args, "--enable-bootstrap-token-auth=true")
		a.Contains(args, "--tls-min-version=VersionTLS12", "extra args win")
		a.NotContains(args, "--tls-min-version=VersionTLS13")
		a.Contains(args, "--v=3")
		a.True(slices.IsSorted(args[1:]))
		a.Equal("example.org/apiserver:v1.34.0-custom", container(pod)["image"])
		a.Equal("kube-system", pod["metadata"].(map[string]any)["namespace"])
		a.Equal(true, pod["spec"].(map[string]any)["hostNetwork"])
		a.Contains(pod["spec"].(map[string]any)["volumes"], map[string]any{"name": "secrets", "hostPath": map[string]any{"path": filepath.Join(dir, "secrets", "kube-apiserver")}})
	})

	ctest.AssertResource(env, "kube-controller-manager", func(r *k8s.StaticPod, a *assert.Assertions) {
		args := command(r.TypedSpec().Pod)
		a.Equal("registry.k8s.io/kube-controller-manager:v1.34.0", container(r.TypedSpec().Pod)["image"])
		a.Contains(args, "--cluster-cidr=10.244.0.0/16")
		a.Contains(args, "--kubeconfig=/system/secrets/kubernetes/kube-controller-manager/kubeconfig")
		a.Contains(args, "--cluster-signing-key-file=/system/secrets/kubernetes/kube-controller-manager/ca.key")
	})

	ctest.AssertResource(env, "kube-scheduler", func(r *k8s.StaticPod, a *assert.Assertions) {
		a.Contains(command(r.TypedSpec().Pod), "--config=/system/config/kubernetes/kube-scheduler/scheduler-config.yaml")
		a.Contains(container(r.TypedSpec().Pod)["volumeMounts"], map[string]any{"name": "sched", "mountPath": "/sched", "readOnly": true})
	})

	for _, f := range []string{"kube-apiserver/admission-control-config.yaml", "kube-apiserver/auditpolicy.yaml", "kube-apiserver/authorization-config.yaml", "kube-scheduler/scheduler-config.yaml"} {
		env.WaitFile(filepath.Join(dir, "config", f))
	}

	authz, err := os.ReadFile(filepath.Join(dir, "config", "kube-apiserver", "authorization-config.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(authz), "kind: AuthorizationConfiguration")
	assert.Contains(t, string(authz), "type: Node")

	admission, err := os.ReadFile(filepath.Join(dir, "config", "kube-apiserver", "admission-control-config.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(admission), "name: PodSecurity")

	// A worker: no static pods.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	ctest.AssertIDs[*k8s.StaticPod](env)
}

// TestStaticPodsAfterAPIReady: with AfterAPIReady, the API server's pod comes first and the
// controller manager's and scheduler's once the manifests were applied (the API was ready).
func TestStaticPodsAfterAPIReady(t *testing.T) {
	dir := t.TempDir()
	env := staticPodEnv(t, &k8sctrl.StaticPodController{SecretsDir: filepath.Join(dir, "secrets"), ConfigDir: filepath.Join(dir, "config"),
		AuditLogDir: filepath.Join(dir, "audit"), AfterAPIReady: true})

	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane))...)
	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver")

	env.Create(k8s.NewManifestStatus(k8s.ControlPlaneNamespaceName))
	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver", "kube-controller-manager", "kube-scheduler")
}

// staticPodEnv runs ctrl with the controllers that make its inputs from a machine config.
func staticPodEnv(t *testing.T, ctrl *k8sctrl.StaticPodController) *ctest.Env {
	t.Helper()

	return ctest.Start(t,
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubernetesCertSANsController(),
		&secretsctrl.KubernetesDynamicCertsController{},
		&secretsctrl.KubernetesController{},
		controlplane.NewAPIServerConfigController(),
		controlplane.NewControllerManagerConfigController(),
		controlplane.NewSchedulerConfigController(),
		controlplane.NewAdmissionControlConfigController(),
		controlplane.NewAuditPolicyConfigController(),
		controlplane.NewAuthorizationConfigController(),
		k8sctrl.NewNodeIPConfigController(),
		ctrl,
	)
}

// TestStaticPodsDisabled: machine.controlPlane.controllerManager.disabled and
// scheduler.disabled keep that component's static pod off this control plane, and remove it
// when the field flips on a running node.
func TestStaticPodsDisabled(t *testing.T) {
	dir := t.TempDir()
	env := staticPodEnv(t, &k8sctrl.StaticPodController{SecretsDir: filepath.Join(dir, "secrets"), ConfigDir: filepath.Join(dir, "config"), AuditLogDir: filepath.Join(dir, "audit")})

	disable := func(cm, sched bool) func(*v1alpha1.Config) {
		return func(c *v1alpha1.Config) {
			c.MachineConfig.MachineControlPlane = &v1alpha1.MachineControlPlaneConfig{
				MachineControllerManager: &v1alpha1.MachineControllerManagerConfig{MachineControllerManagerDisabled: new(cm)},
				MachineScheduler:         &v1alpha1.MachineSchedulerConfig{MachineSchedulerDisabled: new(sched)},
			}
		}
	}

	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane, disable(false, true)))...)
	ctest.AssertResource(env, k8s.SchedulerConfigID, func(r *k8s.SchedulerConfig, a *assert.Assertions) { a.False(r.TypedSpec().Enabled) })
	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver", "kube-controller-manager")

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, disable(false, false)))
	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver", "kube-controller-manager", "kube-scheduler")

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, disable(true, false)))
	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver", "kube-scheduler")
}
