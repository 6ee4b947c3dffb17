package faults

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// clockJumpEnv enables TestClockJump. It sets the host's clock, which every process on the
// machine sees, so it must run alone: hack/test.sh runs it after the other packages.
const clockJumpEnv = "FAULTS_CLOCK_JUMP"

// clockJumpLifetime is the nodes' certificate lifetime in a clock-jump run: shorter than the
// jump, so a jump forward expires every certificate the nodes issued.
const clockJumpLifetime = time.Hour

// clockBound is how long the cluster may take to be healthy again after a jump: certificates
// are checked against the wall clock once a minute (secrets.checkInterval), then reissued.
const clockBound = 3 * time.Minute

// TestClockJump: the clock of every node jumps two hours forward (past the end of every
// certificate the nodes issued) and then back to the real time (before the start of the ones
// issued meanwhile). Each time the nodes reissue what the new time made invalid, the cluster
// is healthy again within clockBound, and the etcd keys written before are all readable.
// Needs root; the clock is put back to the real time when the test ends, however it ends.
func TestClockJump(t *testing.T) {
	if os.Getenv(clockJumpEnv) == "" {
		t.Skipf("sets the host's clock: run it alone, as root, with %s=1 (hack/test.sh does)", clockJumpEnv)
	}

	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 needs root to set the clock", clockJumpEnv)
	}

	if err := clusterHealthy(t); err != nil {
		awaitHealthy(t, time.Now(), healthyBound)
	}

	keys := putKeys(t, etcdClient(t, cp1), "clock", 20)

	// The real time is the start's wall clock plus the monotonic time since.
	start := time.Now()
	realNow := func() time.Time { return start.Round(0).Add(time.Since(start)) }

	t.Cleanup(func() {
		if err := setClock(realNow()); err != nil {
			t.Errorf("putting the clock back: %v (set it by hand)", err)
		}
	})

	for _, step := range []struct {
		name  string
		delta time.Duration
	}{
		{"forward 2h", 2 * time.Hour},
		{"back to the real time", 0},
	} {
		jumped := time.Now()

		if err := setClock(realNow().Add(step.delta)); err != nil {
			t.Fatalf("setting the clock %s: %v", step.name, err)
		}

		t.Logf("clock jumped %s: now %s", step.name, time.Now().Format(time.RFC3339))

		took := awaitHealthy(t, jumped, clockBound)
		recordRecovery("clock jump "+step.name, took)

		// A new client: the certificate files it reads were reissued for the new time.
		checkKeys(t, etcdClient(t, cp1), keys)
	}
}

// setClock sets the system's wall clock.
func setClock(to time.Time) error {
	ts := unix.NsecToTimespec(to.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("clock_settime: %w", err)
	}

	return nil
}
