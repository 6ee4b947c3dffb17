package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestZStoppedNodeReported stops the worker, so it runs last: go test runs a package's tests in
// source order, its files sorted by name, and this file sorts last (the secrets test reads the
// worker's logs).
func TestZStoppedNodeReported(t *testing.T) {
	must(t, "-n", w1, "shutdown", "--wait=false")

	deadline := time.Now().Add(time.Minute)

	for {
		stdout, stderr, code := talosctl(t, "-e", cp1, "-n", strings.Join([]string{cp1, cp2, w1}, ","), "memory")
		if code != 0 && strings.Contains(stderr, w1) {
			if len(rowsFor(stdout, cp1, cp2)) != 2 {
				t.Fatalf("the live nodes must still answer:\n%s", stdout)
			}

			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("stopped node not reported: exit %d\n%s%s", code, stdout, stderr)
		}

		time.Sleep(200 * time.Millisecond)
	}
}
