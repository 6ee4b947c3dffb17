// Package reaper lets machined, as PID 1 of a node, reap the orphans the kernel hands it
// (containerd's shims detach from containerd, so they end as machined's children) without taking
// the exit status of its own children from the os/exec calls that wait for them.
//
// Go starts every child with a pidfd (CLONE_PIDFD) and holds it until Wait returns: a zombie
// child of machined without a pidfd in machined's own file table is an orphan nobody waits for.
package reaper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sweep is how often the reaper looks without a SIGCHLD (signals coalesce).
const sweep = 10 * time.Second

// Run reaps orphans until ctx ends. Only the init of a pid namespace gets orphans
// (runtime.Mode.PID1); elsewhere it would only wait for its own children.
func Run(ctx context.Context, logf func(format string, args ...any)) {
	if err := pidfdsWork(); err != nil {
		logf("reaper: orphans are not reaped: %v", err)

		return
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)

	defer signal.Stop(sig)

	tick := time.NewTicker(sweep)
	defer tick.Stop()

	for {
		Reap()

		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
	}
}

// Reap waits for each zombie child of this process that no os/exec call owns, and returns their
// PIDs.
func Reap() []int {
	// Zombies first, then the pidfds: a child started in between is then never taken for an orphan.
	zombies := zombieChildren()
	if len(zombies) == 0 {
		return nil
	}

	owned := ownedChildren()

	var reaped []int

	for _, pid := range zombies {
		if owned[pid] {
			continue
		}

		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			reaped = append(reaped, pid)
		}
	}

	return reaped
}

// zombieChildren lists this process's children that have exited and are not waited for yet.
func zombieChildren() []int {
	self := os.Getpid()

	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}

	var pids []int

	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}

		state, ppid, err := stat(pid)
		if err == nil && state == 'Z' && ppid == self {
			pids = append(pids, pid)
		}
	}

	return pids
}

// stat reads a process's state and parent from /proc/PID/stat; the command name in parentheses
// may hold spaces, so the fields are counted after its closing one.
func stat(pid int) (byte, int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}

	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}

	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 {
		return 0, 0, errors.New("malformed stat")
	}

	ppid, err := strconv.Atoi(string(fields[1]))

	return fields[0][0], ppid, err
}

// ownedChildren are the PIDs of the pidfds this process holds (its own exec.Cmd children).
func ownedChildren() map[int]bool {
	owned := map[int]bool{}

	infos, _ := filepath.Glob("/proc/self/fdinfo/*")
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}

		for line := range bytes.Lines(b) {
			if rest, ok := bytes.CutPrefix(line, []byte("Pid:")); ok {
				if pid, err := strconv.Atoi(string(bytes.TrimSpace(rest))); err == nil && pid > 0 {
					owned[pid] = true
				}
			}
		}
	}

	return owned
}

// pidfdsWork checks that the kernel has pidfds, which Go then uses for every child it starts.
func pidfdsWork() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("the kernel has no pidfds (pidfd_open: %w), so machined's own children cannot be told from orphans", err)
	}

	return unix.Close(fd)
}
