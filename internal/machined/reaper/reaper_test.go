package reaper

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test process becomes a subreaper, so an orphaned grandchild comes to it as to an init.
func TestReapTakesOrphansNotOwnChildren(t *testing.T) {
	if err := pidfdsWork(); err != nil {
		t.Skip(err)
	}

	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}

	// Our own child exits at once but is waited for only at the end.
	own := exec.Command("true")
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}

	// The shell prints its background child's PID and exits; the child is orphaned to us.
	out, err := exec.Command("sh", "-c", "sleep 0.2 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}

	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}

	var reaped []int

	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(reaped, orphan); {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d was not reaped (reaped %v)", orphan, reaped)
		}

		time.Sleep(50 * time.Millisecond)

		reaped = append(reaped, Reap()...)
	}

	if slices.Contains(reaped, own.Process.Pid) {
		t.Fatalf("Reap took our own child %d", own.Process.Pid)
	}

	// The exit status of our own child is still ours.
	if err = own.Wait(); err != nil {
		t.Fatalf("own child: %v", err)
	}
}
