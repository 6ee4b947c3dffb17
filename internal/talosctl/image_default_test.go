package talosctl

import (
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/images"
)

// TestImageDefault prints the list without a node, as upstream does: one reference a line, in
// upstream v1.11's order, each one the node image carries (less the installer).
func TestImageDefault(t *testing.T) {
	isolate(t)

	code, out, errOut := run(t, "image", "default")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}

	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if strings.Join(lines, "\n") != strings.Join(images.DefaultList(), "\n") {
		t.Errorf("printed:\n%s", out)
	}

	if lines[0] != images.Flannel || lines[len(lines)-1] != images.Pause || lines[3] != "registry.k8s.io/kube-apiserver:v1.34.0" {
		t.Errorf("order differs from upstream's (flannel first, pause last):\n%s", out)
	}
}
