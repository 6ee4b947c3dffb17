package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStateWriteFailsDuringApply: the node's disk refuses writes while a config is applied.
//
// Simulation, rootless: a small tmpfs under the state folder needs root, so the write failure
// is made with RLIMIT_FSIZE on the node's machined (prlimit(2), allowed on one's own processes):
// every write past 1 KiB of a file fails with EFBIG, as it would with ENOSPC on a full disk
// (the Go runtime ignores SIGXFSZ, so the write returns the error). A machine config is several
// KiB, and every log file is past 1 KiB, so both the config write and machined's own logging
// fail. The apply must fail with an error, the node keep its old config whole and keep serving;
// once the disk has room again, the same apply succeeds.
func TestStateWriteFailsDuringApply(t *testing.T) {
	if err := clusterHealthy(t); err != nil {
		awaitHealthy(t, time.Now(), healthyBound)
	}

	node := allNodes[rng.IntN(len(allNodes))]
	pid := servicePID("machined", node)

	if pid == 0 {
		t.Fatalf("machined does not run on %s", node)
	}

	before := configAnnotation(t, node, "faults-gen")
	next := fmt.Sprintf("diskfull-%d", rng.IntN(1e6))
	patch := fmt.Sprintf(`[{"op": "add", "path": "/machine/nodeAnnotations", "value": {"faults-gen": %q}}]`, next)

	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1024, Max: unix.RLIM_INFINITY}, &old); err != nil {
		t.Skipf("cannot limit the file size of machined (%d): %v", pid, err)
	}

	full := time.Now()
	t.Logf("disk of %s (machined %d) refuses writes past 1 KiB", node, pid)

	out, stderr, code := talosctl(t, "-n", node, "patch", "machineconfig", "--mode", "no-reboot", "-p", patch)
	t.Logf("apply with a full disk: exit %d %s%s", code, out, strings.TrimSpace(stderr))

	if got := configAnnotation(t, node, "faults-gen"); got != before {
		t.Fatalf("config on a full disk: faults-gen=%q, want the old %q (apply exit %d)", got, before, code)
	}

	if code == 0 {
		t.Fatalf("apply on a full disk reported success, but the config was not written:\n%s", stderr)
	}

	// The node still serves while its disk is full.
	if _, stderr, code = talosctl(t, "-n", node, "version"); code != 0 {
		t.Fatalf("node with a full disk does not answer: %s", stderr)
	}

	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &old, nil); err != nil {
		t.Fatal(err)
	}

	recordRecovery("state write failure during apply", awaitHealthy(t, full, healthyBound))

	if _, stderr, code = talosctl(t, "-n", node, "patch", "machineconfig", "--mode", "no-reboot", "-p", patch); code != 0 {
		t.Fatalf("apply once the disk has room: exit %d\n%s", code, stderr)
	}

	if got := configAnnotation(t, node, "faults-gen"); got != next {
		t.Fatalf("config after the retried apply: faults-gen=%q, want %q", got, next)
	}

	if servicePID("machined", node) != pid {
		t.Errorf("machined on %s restarted while its disk was full", node)
	}
}
