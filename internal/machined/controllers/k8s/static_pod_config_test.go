package k8s_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

func configPod(name, namespace string) v1alpha1.Unstructured {
	md := map[string]any{"name": name}
	if namespace != "" {
		md["namespace"] = namespace
	}

	return v1alpha1.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": md,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10", "ports": []any{map[string]any{"containerPort": 80}}}}},
	}}
}

// TestStaticPodsFromConfig: machine.pods become StaticPods named <namespace>-<name> (default
// when none is given) beside another controller's StaticPod, which a config change leaves
// alone; a pod dropped from the config goes.
func TestStaticPodsFromConfig(t *testing.T) {
	env := ctest.Start(t, &k8sctrl.StaticPodConfigController{})

	// As if StaticPodController owned it: a pod of another owner is not the config's to remove.
	other := k8s.NewStaticPod(k8s.NamespaceName, "kube-apiserver")
	other.TypedSpec().Pod = map[string]any{"kind": "Pod"}
	env.Create(other)

	env.Create(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachinePods = []v1alpha1.Unstructured{configPod("web", ""), configPod("agent", "kube-system")}
	}))

	ctest.AssertIDs[*k8s.StaticPod](env, "default-web", "kube-apiserver", "kube-system-agent")
	ctest.AssertResource(env, "default-web", func(r *k8s.StaticPod, a *assert.Assertions) {
		pod := r.TypedSpec().Pod
		a.Equal("Pod", pod["kind"])
		a.Equal("web", pod["metadata"].(map[string]any)["name"])
		a.Equal("registry.k8s.io/pause:3.10", container(pod)["image"])
		a.Equal(int64(80), container(pod)["ports"].([]any)[0].(map[string]any)["containerPort"], "numbers as the protobuf encoding takes them")
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachinePods = []v1alpha1.Unstructured{configPod("agent", "kube-system")}
	}))

	ctest.AssertIDs[*k8s.StaticPod](env, "kube-apiserver", "kube-system-agent")
}

// TestCheckPods: an item of machine.pods that is not kind Pod, or has no metadata.name, is
// refused naming machine.pods[i]; a good pod passes.
func TestCheckPods(t *testing.T) {
	good := configPod("web", "").Object

	for _, tc := range []struct {
		name string
		pod  map[string]any
		want string
	}{
		{"pod", good, ""},
		{"deployment", map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"}}, `machine.pods[1]: kind "Deployment": a static pod is kind Pod`},
		{"no kind", map[string]any{"metadata": map[string]any{"name": "d"}}, `machine.pods[1]: kind "": a static pod is kind Pod`},
		{"no name", map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"namespace": "x"}}, "machine.pods[1]: metadata.name: missing"},
		{"no metadata", map[string]any{"apiVersion": "v1", "kind": "Pod"}, "machine.pods[1]: metadata.name: missing"},
		{"bad namespace", map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": 3}}, "machine.pods[1]: metadata.namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := k8sctrl.CheckPods([]map[string]any{good, tc.pod})
			if tc.want == "" {
				require.NoError(t, err)

				return
			}

			require.ErrorContains(t, err, tc.want)
			assert.NotContains(t, err.Error(), "machine.pods[0]", "the good pod passes")
		})
	}
}
