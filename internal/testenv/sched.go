package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sched is what the scheduler has counted for a process, summed over its threads.
type Sched struct {
	CPU    time.Duration // time on a CPU
	Slices int64         // times a thread was put on a CPU: about one context switch each
}

// Sub is s minus an earlier reading.
func (s Sched) Sub(before Sched) Sched {
	return Sched{CPU: s.CPU - before.CPU, Slices: s.Slices - before.Slices}
}

// ProcessSched reads /proc/PID/task/*/schedstat. Threads that ended are not counted, so read
// it around work done by long-lived threads (a Go process keeps its threads).
func ProcessSched(pid int) (Sched, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return Sched{}, err
	}

	var total Sched

	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue // thread ended
		}

		var ns, wait, slices int64
		if _, err = fmt.Sscan(string(data), &ns, &wait, &slices); err == nil {
			total.CPU += time.Duration(ns)
			total.Slices += slices
		}
	}

	return total, nil
}

// FindProcess returns the pid of the process whose command line holds every one of args.
func FindProcess(args ...string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}

	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}

		cmdline := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if containsAll(cmdline, args) {
			var pid int

			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)

			return pid, nil
		}
	}

	return 0, fmt.Errorf("no process runs with %q", args)
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		found := false

		for _, h := range have {
			if h == w {
				found = true

				break
			}
		}

		if !found {
			return false
		}
	}

	return true
}
