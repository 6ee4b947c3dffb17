package k8s_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/testenv"
)

func manifest(id string, objs ...map[string]any) *k8s.Manifest {
	m := k8s.NewManifest(k8s.ControlPlaneNamespaceName, id)
	for _, o := range objs {
		m.TypedSpec().Items = append(m.TypedSpec().Items, k8s.SingleManifest{Object: o})
	}

	return m
}

func configMap(ns, name, value string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"data":     map[string]any{"key": value},
	}
}

// TestManifestApplyRealAPIServer: against our etcd and a real kube-apiserver, the controller
// applies the manifests (the namespace of a later manifest's object first), keeps retrying
// until the API server is up, names a bad manifest, and a re-apply changes nothing.
func TestManifestApplyRealAPIServer(t *testing.T) {
	kubeconfig := testenv.StartAPIServer(t, "127.5.14.1")

	env := ctest.Start(t, &k8sctrl.ManifestApplyController{RetryInterval: 500 * time.Millisecond})

	kube := secrets.NewKubernetes()
	kube.TypedSpec().LocalhostAdminKubeconfig = kubeconfig

	// The ConfigMap's namespace comes in a later manifest: namespaces go first whatever the order.
	env.Create(kube,
		manifest("00-config", configMap("talos-test", "settings", "one")),
		manifest("10-namespace", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "talos-test"}}),
		manifest("20-bad", map[string]any{"apiVersion": "example.org/v1", "kind": "NoSuchKind", "metadata": map[string]any{"name": "x"}}),
	)

	// The API server takes a while to answer: the controller retries until it does.
	ctest.AssertResource(env, k8s.ManifestStatusID, func(r *k8s.ManifestStatus, a *assert.Assertions) {
		a.Equal([]string{"00-config", "10-namespace"}, r.TypedSpec().ManifestsApplied, "the bad manifest is not applied")
	})

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cm, err := cs.CoreV1().ConfigMaps("talos-test").Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "one", cm.Data["key"])
	require.Len(t, cm.ManagedFields, 1)
	assert.Equal(t, k8sctrl.ManifestFieldManager, cm.ManagedFields[0].Manager)
	assert.Equal(t, metav1.ManagedFieldsOperationApply, cm.ManagedFields[0].Operation)

	// Fixing the bad manifest and changing another: both applied, the unchanged objects kept.
	before := cm.ResourceVersion

	env.Put(manifest("20-bad", configMap("talos-test", "fixed", "two")))

	ctest.AssertResource(env, k8s.ManifestStatusID, func(r *k8s.ManifestStatus, a *assert.Assertions) {
		a.Equal([]string{"00-config", "10-namespace", "20-bad"}, r.TypedSpec().ManifestsApplied)
	})

	fixed, err := cs.CoreV1().ConfigMaps("talos-test").Get(ctx, "fixed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "two", fixed.Data["key"])

	cm, err = cs.CoreV1().ConfigMaps("talos-test").Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, before, cm.ResourceVersion, "re-applying an unchanged object does not change it")

	// An object the API server cannot place names its manifest, kind and name.
	err = k8sctrl.ApplyManifests(ctx, kubeconfig, manifest("30-broken",
		map[string]any{"apiVersion": "example.org/v1", "kind": "NoSuchKind", "metadata": map[string]any{"name": "x"}}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `manifest "30-broken": NoSuchKind "x": no matches for kind "NoSuchKind"`)
}
