package container

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// The auth_* tests run before cluster_test.go's (files in name order): it resets the worker,
// then destroys the cluster.

// TestWorkerTakeoverReachesNoRole: root on the worker (its join token and every file of its
// state, /var included: kubelet's and containerd's, and of its /system tmpfs, where the
// services' secrets live) reaches no role on either node, directly or routed (upstream's
// CVE-2022-36103).
func TestWorkerTakeoverReachesNoRole(t *testing.T) {
	dir := filepath.Join(stateRoot, clusterName)
	nodes := []string{cp, w}

	// /system is the node's tmpfs: copied out as the admin, as root on the worker would read it.
	system := t.TempDir()
	cli().Must(t, "-n", w, "copy", "/system", system)

	testenv.WorkerTakeover(t, talosconfig, filepath.Join(dir, clusterName+"-worker-1.yaml"), cp+":50001", nodes, nodes,
		filepath.Join(dir, clusterName+"-worker-1"), system)
}

// TestWorkerForwardsNowhere: a worker endpoint serves the worker and refuses to forward to
// another node, naming the fix; a control plane forwards to the worker.
func TestWorkerForwardsNowhere(t *testing.T) {
	// A worker an earlier test rebooted may still be on its way back.
	testenv.WaitFor(t, "the worker answering", 3*time.Minute, func() bool {
		_, _, code := talosctl(t, "-e", w, "-n", w, "version")

		return code == 0
	})

	_, stderr, code := talosctl(t, "-e", w, "-n", cp, "version")
	if code == 0 || !strings.Contains(stderr, "use a control plane as the endpoint") {
		t.Fatalf("-e worker -n control plane: exit %d, stderr:\n%s\nwant refused naming the fix", code, stderr)
	}

	cli().Must(t, "-e", cp, "-n", w, "version")
}
