package k8s_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

func staticPod(name string) *k8s.StaticPod {
	p := k8s.NewStaticPod(k8s.NamespaceName, name)
	p.TypedSpec().Pod = map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": "kube-system"}}

	return p
}

func podNames(t *testing.T, url string) []string {
	t.Helper()

	resp, err := http.Get(url) //nolint:noctx // a test's loopback request
	require.NoError(t, err)

	defer resp.Body.Close()

	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}

	require.NoError(t, json.Unmarshal(data, &list), string(data))
	assert.Equal(t, "PodList", list.Kind)

	names := []string{}
	for _, i := range list.Items {
		names = append(names, i.Metadata.Name)
	}

	return names
}

// TestStaticPodServer: the server on loopback serves the StaticPod resources as kubelet's pod
// list, follows their changes, and publishes its URL.
func TestStaticPodServer(t *testing.T) {
	env := ctest.Start(t, &k8sctrl.StaticPodServerController{Listen: "127.5.14.2:0"})

	var url string

	ctest.AssertResource(env, k8s.StaticPodServerStatusResourceID, func(r *k8s.StaticPodServerStatus, a *assert.Assertions) {
		url = r.TypedSpec().URL
		a.Regexp(`^http://127\.5\.14\.2:\d+$`, url)
	})

	assert.Empty(t, podNames(t, url))

	env.Create(staticPod("kube-scheduler"), staticPod("kube-apiserver"))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"kube-apiserver", "kube-scheduler"}, podNames(t, url))
	}, ctest.Timeout, 50*time.Millisecond)

	env.Destroy(staticPod("kube-scheduler"))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"kube-apiserver"}, podNames(t, url))
	}, ctest.Timeout, 50*time.Millisecond)
}
