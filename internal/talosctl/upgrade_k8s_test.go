package talosctl

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
)

func TestUpgradePath(t *testing.T) {
	for _, tc := range []struct {
		from, to, err string
		want          [2]string // the parsed versions, as the upgrade uses them
	}{
		{"v1.34.0", "v1.34.0", "", [2]string{"1.34.0", "1.34.0"}},
		{"v1.34.0", "v1.34.2", "", [2]string{"1.34.0", "1.34.2"}},
		{"1.33.4", "v1.34.0", "", [2]string{"1.33.4", "1.34.0"}},
		{"v1.34.1+k3s1", "v1.35.0-rc.1", "", [2]string{"1.34.1+k3s1", "1.35.0-rc.1"}},
		{"v1.34.0", "v1.33.0", "downgrades are not supported", [2]string{}},
		{"v1.32.0", "v1.34.0", "skips a minor version", [2]string{}},
		{"v1.34.0", "v2.0.0", "skips a minor version", [2]string{}},
		{"v1.34.0", "latest", `--to "latest"`, [2]string{}},
		{"1.34", "v1.34.0", `--from "1.34"`, [2]string{}},
	} {
		from, to, err := upgradePath(nil, tc.from, tc.to) // the API server is asked only without --from

		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s -> %s: %v", tc.from, tc.to, err)
		case tc.err == "" && (from == nil || to == nil || [2]string{from.String(), to.String()} != tc.want):
			t.Errorf("%s -> %s: got %v -> %v, want %s -> %s", tc.from, tc.to, from, to, tc.want[0], tc.want[1])
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s -> %s: error %v, want one naming %q", tc.from, tc.to, err, tc.err)
		case tc.err != "" && (from != nil || to != nil):
			t.Errorf("%s -> %s: refused with versions %v -> %v, want none", tc.from, tc.to, from, to)
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
