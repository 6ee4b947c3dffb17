package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// `cluster create --with-init-node` makes the first control plane an init node: its config says
// machine.type init and etcd starts there without the Bootstrap API (create asks none); the
// second control plane joins it.
func TestClusterCreateWithInitNode(t *testing.T) {
	h := t.TempDir()
	c := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: h, Timeout: 3 * time.Minute}

	t.Cleanup(func() { c.Run(t, "cluster", "destroy", "--name", "init") })

	out := c.Must(t, "cluster", "create", "--name", "init", "--controlplanes", "2", "--workers", "0",
		"--cidr", "127.5.43.0/24", "--with-init-node", "--wait-timeout", "3m")
	if !strings.Contains(out, "etcd bootstraps itself on the init node init-controlplane-1") || strings.Contains(out, "etcd bootstrap on") {
		t.Errorf("create asked a bootstrap of the init node, or did not say it needs none:\n%s", out)
	}

	if show := c.Must(t, "cluster", "show", "--name", "init"); !regexp.MustCompile(`init-controlplane-1\s+init\s`).MatchString(show) ||
		!regexp.MustCompile(`init-controlplane-2\s+controlplane\s`).MatchString(show) {
		t.Errorf("cluster show: the first node is not the init node:\n%s", show)
	}

	if mt := c.Must(t, "-n", "127.5.43.2", "get", "machinetype"); !regexp.MustCompile(`(?m)\binit\s*$`).MatchString(mt) {
		t.Errorf("the first node's machine type:\n%s", mt)
	}

	if members := c.Must(t, "-n", "127.5.43.3", "etcd", "members"); strings.Count(members, " init-controlplane-") != 2 {
		t.Errorf("etcd members seen from the second control plane (want both):\n%s", members)
	}
}
