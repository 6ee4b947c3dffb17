package talosctl

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
)

func TestUpgradePath(t *testing.T) {
	for _, tc := range []struct {
		from, to, err string
	}{
		{"v1.34.0", "v1.34.0", ""},
		{"v1.34.0", "v1.34.2", ""},
		{"1.33.4", "v1.34.0", ""},
		{"v1.34.0", "v1.33.0", "downgrades are not supported"},
		{"v1.32.0", "v1.34.0", "skips a minor version"},
		{"v1.34.0", "v2.0.0", "skips a minor version"},
		{"v1.34.0", "latest", `--to "latest"`},
	} {
		_, _, err := upgradePath(nil, tc.from, tc.to) // the API server is asked only without --from

		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s -> %s: %v", tc.from, tc.to, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s -> %s: error %v, want one naming %q", tc.from, tc.to, err, tc.err)
		}
	}
}

// The patch sets exactly the component's image and loads as a strategic merge patch.
func TestImagePatch(t *testing.T) {
	p := imagePatch("cluster.apiServer.image", "registry.k8s.io/kube-apiserver:v1.34.1")
	if want := `{"cluster": {"apiServer": {"image": "registry.k8s.io/kube-apiserver:v1.34.1"}}}`; p != want {
		t.Fatalf("patch %s, want %s", p, want)
	}

	if _, err := configpatcher.LoadPatch([]byte(p)); err != nil {
		t.Fatal(err)
	}
}
