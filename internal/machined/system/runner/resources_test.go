package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// startShell runs a shell through p that prints its pid and waits; it returns the pid.
func startShell(t *testing.T, p *Process, out *testenv.SyncBuffer) int {
	t.Helper()

	p.Args = []string{"/bin/sh", "-c", "echo pid=$$; exec sleep 60"}
	p.Output = out

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- p.Run(ctx) }()

	t.Cleanup(func() { cancel(); <-done })

	var pid int

	testenv.WaitFor(t, "the shell's pid", 10*time.Second, func() error {
		for line := range strings.Lines(out.String()) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "pid="); ok {
				pid, _ = strconv.Atoi(v)

				return nil
			}
		}

		return fmt.Errorf("output so far: %q", out.String())
	})

	return pid
}

func readProc(t *testing.T, pid int, name string) string {
	t.Helper()

	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), name))
	if err != nil {
		t.Fatal(err)
	}

	return string(data)
}

// The runner passes the service's environment and sets its oom_score_adj on the real process.
func TestProcessEnvAndOOMScoreAdj(t *testing.T) {
	own := strings.TrimSpace(readProc(t, os.Getpid(), "oom_score_adj"))

	for _, score := range []int{500, -998} {
		t.Run(strconv.Itoa(score), func(t *testing.T) {
			var out testenv.SyncBuffer

			p := &Process{Env: []string{"GOMEMLIMIT=107374180"}, OOMScoreAdj: score}
			pid := startShell(t, p, &out)

			env := strings.Split(readProc(t, pid, "environ"), "\x00")
			if !slices.Contains(env, "GOMEMLIMIT=107374180") {
				t.Fatalf("environment of pid %d: %q, want GOMEMLIMIT=107374180", pid, env)
			}

			// Raising the score needs nothing; lowering it needs CAP_SYS_RESOURCE (CI runs as
			// root), and without it the runner leaves the score as it was and says nothing.
			want := strconv.Itoa(score)
			if score < 0 && !MayLowerOOMScoreAdj() {
				want = own
			}

			testenv.WaitFor(t, "oom_score_adj "+want, 5*time.Second, func() error {
				if got := strings.TrimSpace(readProc(t, pid, "oom_score_adj")); got != want {
					return fmt.Errorf("oom_score_adj of pid %d is %s", pid, got)
				}

				return nil
			})

			if strings.Contains(out.String(), "oom_score_adj") {
				t.Fatalf("the service's log has an oom_score_adj error: %q", out.String())
			}
		})
	}
}

// The runner makes the service's cgroup with its hard memory limit and starts the service in
// it. The cgroup is made under the test's own memory cgroup.
func TestProcessEntersCgroup(t *testing.T) {
	if os.Getuid() != 0 && !testenv.InCI() {
		t.Skip("making a cgroup needs root")
	}

	version := cgroupVersion()
	if version == 0 {
		t.Fatalf("no memory cgroup controller at %s", CgroupRoot)
	}

	parent := &Cgroup{Path: filepath.Join(ownMemoryCgroup(t, version), fmt.Sprintf("runner-test-%d", os.Getpid()))}
	cg := &Cgroup{Path: filepath.Join(parent.Path, "svc"), Parent: parent, MemoryMax: 64 << 20}

	root := CgroupRoot
	if version == 1 {
		root = filepath.Join(CgroupRoot, "memory")
	}

	t.Cleanup(func() {
		// The process is gone once startShell's cleanup (registered later, run first) ends.
		for _, d := range []string{cg.Path, parent.Path} {
			if err := os.Remove(filepath.Join(root, d)); err != nil {
				t.Errorf("removing the test's cgroup: %v", err)
			}
		}
	})

	var out testenv.SyncBuffer

	pid := startShell(t, &Process{Cgroup: cg}, &out)

	testenv.WaitFor(t, "the shell in "+cg.Path, 5*time.Second, func() error {
		if got := ownMemoryCgroup(t, version, pid); got != cg.Path {
			return fmt.Errorf("pid %d is in %s; log %q", pid, got, out.String())
		}

		return nil
	})

	limitFile := "memory.max"
	if version == 1 {
		limitFile = "memory.limit_in_bytes"
	}

	got, err := os.ReadFile(filepath.Join(root, cg.Path, limitFile))
	if err != nil {
		t.Fatal(err)
	}

	if strings.TrimSpace(string(got)) != strconv.Itoa(64<<20) {
		t.Fatalf("%s of %s = %s, want %d", limitFile, cg.Path, got, 64<<20)
	}
}

// ownMemoryCgroup is the memory cgroup of the process (this one when no pid is given).
func ownMemoryCgroup(t *testing.T, version int, pid ...int) string {
	t.Helper()

	p := os.Getpid()
	if len(pid) > 0 {
		p = pid[0]
	}

	for line := range strings.Lines(readProc(t, p, "cgroup")) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}

		if (version == 2 && parts[0] == "0") || (version == 1 && slices.Contains(strings.Split(parts[1], ","), "memory")) {
			return parts[2]
		}
	}

	t.Fatalf("no memory cgroup for pid %d", p)

	return ""
}

// The CPU figures map as upstream's do (its recorded conversions): 1024 shares a core, and
// shares onto cpu.weight linearly from 2..262144 to 1..10000.
func TestCPUWeights(t *testing.T) {
	for _, tc := range []struct{ millicores, shares uint64 }{{100, 102}, {1000, 1024}, {2500, 2560}} {
		if got := MillicoresToShares(tc.millicores); got != tc.shares {
			t.Errorf("MillicoresToShares(%d) = %d, want %d", tc.millicores, got, tc.shares)
		}
	}

	for _, tc := range []struct{ shares, weight uint64 }{{2, 1}, {102, 4}, {1024, 39}, {2048, 79}, {8192, 313}, {262144, 10000}} {
		if got := SharesToCPUWeight(tc.shares); got != tc.weight {
			t.Errorf("SharesToCPUWeight(%d) = %d, want %d", tc.shares, got, tc.weight)
		}
	}

	// At most a core's worth is the same on every node; more is capped at the node's CPUs.
	for _, tc := range []struct{ millicores, weight uint64 }{{100, 4}, {500, 20}, {1000, 39}} {
		if got := MillicoresToCPUWeight(tc.millicores); got != tc.weight {
			t.Errorf("MillicoresToCPUWeight(%d) = %d, want %d", tc.millicores, got, tc.weight)
		}
	}

	if cores := uint64(runtime.NumCPU()); MillicoresToCPUWeight(cores*1000+500) != SharesToCPUWeight(cores*1024) {
		t.Errorf("MillicoresToCPUWeight(%d) = %d, want the weight of the node's %d CPUs, %d", cores*1000+500, MillicoresToCPUWeight(cores*1000+500), cores, SharesToCPUWeight(cores*1024))
	}
}
