package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// A stopped node is reported by name while the live ones still answer. The test stops a node,
// so it runs on a cluster of its own (not the suite's, whose worker other tests read), in any
// order.
func TestStoppedNodeReported(t *testing.T) {
	const cp, w = "127.5.47.2", "127.5.47.3"

	c := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 3 * time.Minute}

	t.Cleanup(func() { c.Run(t, "cluster", "destroy", "--name", "stopped") })
	c.Must(t, "cluster", "create", "--name", "stopped", "--controlplanes", "1", "--workers", "1",
		"--cidr", "127.5.47.0/24", "--wait-timeout", "3m")

	c.Must(t, "-n", w, "shutdown", "--wait=false")

	testenv.WaitFor(t, "the stopped worker reported by name, the control plane answering", time.Minute, func() bool {
		stdout, stderr, code := c.Run(t, "-e", cp, "-n", cp+","+w, "memory")
		if code == 0 || !strings.Contains(stderr, w) {
			return false
		}

		if len(rowsFor(stdout, cp)) != 1 {
			t.Fatalf("the live node must still answer:\n%s", stdout)
		}

		return true
	})
}
