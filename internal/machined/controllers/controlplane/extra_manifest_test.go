package controlplane_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// cluster.extraManifests (with their headers) and a custom CNI's URLs become manifests, fetched
// from a local server; a URL that failed is asked again; a worker fetches nothing.
func TestExtraManifests(t *testing.T) {
	var cniAsks atomic.Int32

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/extra.yaml":
			if r.Header.Get("X-Token") != "secret" {
				http.Error(w, "no token", http.StatusForbidden)

				return
			}

			w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: default\ndata:\n  k: v\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: extra\n"))
		case "/cni.yaml":
			if cniAsks.Add(1) == 1 {
				http.Error(w, "not yet", http.StatusServiceUnavailable)

				return
			}

			w.Write([]byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: my-cni\n  namespace: kube-system\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	env := ctest.Start(t, &controlplane.ExtraManifestController{Retry: 100 * time.Millisecond})

	patch := func(c *v1alpha1.Config) {
		c.ClusterConfig.ExtraManifests = []string{srv.URL + "/extra.yaml"}
		c.ClusterConfig.ExtraManifestHeaders = map[string]string{"X-Token": "secret"}
		c.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: "custom", CNIUrls: []string{srv.URL + "/cni.yaml"}}
	}

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, patch))

	ids := func() (extra, cni string) {
		list, _ := env.State.List(env.Ctx, k8s.NewManifest(k8s.ControlPlaneNamespaceName, "").Metadata())
		for _, r := range list.Items {
			switch id := r.Metadata().ID(); {
			case strings.HasPrefix(id, "99-extra-extra-"):
				extra = id
			case strings.HasPrefix(id, "05-cni-cni-"):
				cni = id
			}
		}

		return extra, cni
	}

	var extra, cni string

	for deadline := time.Now().Add(10 * time.Second); extra == "" || cni == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("manifests: extra %q, cni %q", extra, cni)
		}

		extra, cni = ids()
	}

	ctest.AssertResource(env, extra, func(m *k8s.Manifest, a *assert.Assertions) {
		a.NotNil(find(m, "ConfigMap", "extra"))
		a.NotNil(find(m, "Namespace", "extra"))
	})
	ctest.AssertResource(env, cni, func(m *k8s.Manifest, a *assert.Assertions) {
		a.NotNil(find(m, "DaemonSet", "my-cni"))
	})

	if n := cniAsks.Load(); n < 2 {
		t.Errorf("the CNI's URL was asked %d times: its failure was not retried", n)
	}

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, patch))
	ctest.AssertNoResource[*k8s.Manifest](env, extra)
	ctest.AssertNoResource[*k8s.Manifest](env, cni)
}
