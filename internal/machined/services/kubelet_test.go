package services

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/machined/runtime"
)

// TestKubeletConfigFile: the spec's config is written as kubelet's YAML file, private.
func TestKubeletConfigFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc", "kubernetes")
	require.NoError(t, writeKubeletConfig(dir, map[string]any{"kind": "KubeletConfiguration", "staticPodURL": "http://127.0.0.1:1234"}))

	path := filepath.Join(dir, kubeletConfigName)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	data, err := os.ReadFile(path)
	require.NoError(t, err)

	var got map[string]any
	require.NoError(t, yaml.Unmarshal(data, &got))
	assert.Equal(t, "http://127.0.0.1:1234", got["staticPodURL"])
}

// TestKubeletMounts: kubelet's state and the pods' folders are shared back to the host
// (rshared), under the node's root.
func TestKubeletMounts(t *testing.T) {
	root := t.TempDir()
	mounts := KubeletMounts(runtime.Paths{Root: root})

	find := func(dst string) []string {
		i := slices.IndexFunc(mounts, func(m specs.Mount) bool { return m.Destination == dst })
		require.GreaterOrEqual(t, i, 0, dst)

		return mounts[i].Options
	}

	for _, dst := range []string{"/var/lib/kubelet", "/var/log/pods", "/etc/kubernetes", "/etc/cni", "/opt/cni", "/sys/fs/cgroup", "/run", "/usr/libexec/kubernetes"} {
		assert.Contains(t, find(dst), "rshared", dst)
	}

	for _, m := range mounts {
		if m.Type == "bind" {
			assert.Equal(t, filepath.Join(root, m.Destination), m.Source)
		}
	}
}

// KubeletHealth is healthy on 200 from healthz, and not on an error status (naming it and
// kubelet's words) or when nothing listens; the kubelet service carries it.
func TestKubeletHealth(t *testing.T) {
	var status atomic.Int32

	status.Store(http.StatusServiceUnavailable)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)

			return
		}

		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, "[-]syncloop failed")
	}))

	url := srv.URL + "/healthz"

	err := KubeletHealth(t.Context(), url)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "503 Service Unavailable: [-]syncloop failed")

	status.Store(http.StatusOK)
	require.NoError(t, KubeletHealth(t.Context(), url))

	srv.Close()
	require.Error(t, KubeletHealth(t.Context(), url), "nothing listens")

	svc := Kubelet(&runtime.Runtime{Paths: runtime.Paths{Root: t.TempDir()}})
	require.NotNil(t, svc.HealthFunc, "the kubelet service has no health check")
}
