package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// The worker tests run before e2e_test.go's (files in name order): its last test stops the worker.

// TestWorkerTakeoverReachesNoRole: the join token and every file of a worker's state folder and
// config reach no role on any node, directly or routed (upstream's CVE-2022-36103).
func TestWorkerTakeoverReachesNoRole(t *testing.T) {
	dir := filepath.Join(home, ".talos", "clusters", clusterName)
	all := []string{cp1, cp2, cp3, w1}

	testenv.WorkerTakeover(t, talosconfig, filepath.Join(dir, clusterName+"-worker-1.yaml"), cp1+":50001", all, all,
		filepath.Join(dir, clusterName+"-worker-1"))
}

// TestWorkerForwardsNowhere: with the admin's own certificate, a worker endpoint serves the worker
// and refuses to forward to another node, naming the fix.
func TestWorkerForwardsNowhere(t *testing.T) {
	// A worker an earlier test rebooted may still be on its way back.
	testenv.WaitFor(t, "the worker answering", 3*time.Minute, func() bool {
		_, _, code := talosctl(t, "-e", w1, "-n", w1, "version")

		return code == 0
	})

	_, stderr, code := talosctl(t, "-e", w1, "-n", cp1, "version")
	if code == 0 || !strings.Contains(stderr, "use a control plane as the endpoint") {
		t.Fatalf("-e worker -n control plane: exit %d, stderr:\n%s\nwant refused naming the fix", code, stderr)
	}

	// A control plane forwards to the worker.
	must(t, "-e", cp1, "-n", w1, "version")
}
