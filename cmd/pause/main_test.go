package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestMain lets the test binary be pause itself, so the tests run the real program. Before it
// does, it leaves an orphan for pause to inherit: a sleep whose shell has exited.
func TestMain(m *testing.M) {
	if os.Getenv("PAUSE_TEST_MAIN") == "1" {
		if err := exec.Command("sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 &").Run(); err != nil {
			fmt.Fprintln(os.Stderr, "leaving an orphan:", err)
			os.Exit(2)
		}

		main()

		return
	}

	os.Exit(m.Run())
}

// TestPauseReapsAndExitsOnSignal: pause, as PID 1 of a pod's PID namespace, reaps the orphan it
// inherits when that exits (the SIGCHLD does not stop it), keeps running, and exits 0 on SIGTERM
// or SIGINT.
func TestPauseReapsAndExitsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		var out strings.Builder

		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "PAUSE_TEST_MAIN=1")
		cmd.Stdout, cmd.Stderr = &out, &out
		// A PID namespace of its own (in a user namespace, so no root is needed): pause is its init.
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		}

		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}

		pid := cmd.Process.Pid

		t.Cleanup(func() { _ = cmd.Process.Kill() })

		// Its handler is in place (a signal before it would kill the process), and its orphan is there.
		testenv.WaitFor(t, "pause catching SIGTERM, SIGINT and SIGCHLD", 30*time.Second, func() bool {
			return caught(pid, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
		})

		var orphan int

		testenv.WaitFor(t, "the orphan handed to pause", 10*time.Second, func() bool {
			orphan = childOf(pid, "sleep")
			return orphan != 0
		})

		if err := syscall.Kill(orphan, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}

		// Reaped: its /proc entry goes (a zombie keeps it).
		testenv.WaitFor(t, "the orphan reaped", 10*time.Second, func() error {
			if state, _, err := procStat(orphan); err == nil {
				return fmt.Errorf("orphan %d still there, state %c", orphan, state)
			}

			return nil
		})

		// pause exiting on that SIGCHLD would have come first: an init's exit ends its namespace's
		// processes, and so the orphan.
		if state, _, err := procStat(pid); err != nil || state == 'Z' {
			t.Fatalf("pause exited on SIGCHLD: state %c, %v: %s", state, err, out.String())
		}

		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}

		if err := cmd.Wait(); err != nil {
			t.Fatalf("after %v: %v (want exit 0) %s", sig, err, out.String())
		}

		if want := "shutting down, got signal " + sig.String(); !strings.Contains(out.String(), want) {
			t.Errorf("output %q, want %q", out.String(), want)
		}
	}
}

// caught reports whether process pid has handlers for every one of sigs (SigCgt of its status).
func caught(pid int, sigs ...syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}

	for line := range strings.Lines(string(b)) {
		if hex, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				return false
			}

			for _, s := range sigs {
				if mask&(1<<(s-1)) == 0 {
					return false
				}
			}

			return true
		}
	}

	return false
}

// childOf is the PID of a child of parent running command comm, or 0.
func childOf(parent int, comm string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}

		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}

		if _, ppid, err := procStat(pid); err == nil && ppid == parent {
			return pid
		}
	}

	return 0
}

// procStat is a process's state and parent PID from /proc/PID/stat (counted after the command
// name, which may hold spaces).
func procStat(pid int) (byte, int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}

	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])

	if len(f) < 2 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}

	ppid, err := strconv.Atoi(f[1])

	return f[0][0], ppid, err
}
