// Package netnstest keeps tests that make links and addresses off the machine's network: the
// test binary runs itself again in a network namespace of its own, with only loopback up.
package netnstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

const envIsolated = "TALOS_TEST_NETNS"

// Private reports whether this network namespace has no link but loopback.
func Private() bool {
	ifs, err := net.Interfaces()
	if err != nil {
		return false
	}

	for _, i := range ifs {
		if i.Name != "lo" {
			return false
		}
	}

	return true
}

// privateAtStart records that Isolate found this namespace private already (nsrun, unshare).
var privateAtStart bool

// Own reports whether the tests run in a network namespace of their own: Isolate made it, or
// found it private. Unlike Private it stays true when a test has made links since, so one test's
// leftovers cannot turn the next one into a skip.
func Own() bool {
	return os.Getenv(envIsolated) != "" || privateAtStart
}

// Isolate re-runs the test binary in a new network namespace when this one is shared (root
// only: without root the caller's tests skip). It reports the child's exit code and true when
// it did; false means go on here.
func Isolate() (int, bool) {
	privateAtStart = Private()

	if os.Getenv(envIsolated) != "" || privateAtStart || os.Geteuid() != 0 {
		if os.Getenv(envIsolated) != "" {
			if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "loopback up: %v\n%s", err, out)
			}
		}

		return 0, false
	}

	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envIsolated+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}

	err := cmd.Run()

	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), true
	}

	if err != nil {
		fmt.Fprintf(os.Stderr, "running the tests in a network namespace of their own: %v\n", err)

		return 1, true
	}

	return 0, true
}

// In runs fn on a thread in the network namespace at nsPath (/proc/PID/ns/net, /run/netns/NAME):
// the sockets fn makes are that namespace's. The thread is not given back to the runtime: it
// ends with fn's goroutine.
func In(nsPath string, fn func() error) error {
	errc := make(chan error, 1)

	go func() {
		runtime.LockOSThread() // never unlocked: the thread is in the other namespace

		ns, err := os.Open(nsPath)
		if err != nil {
			errc <- err

			return
		}
		defer ns.Close()

		if err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", nsPath, err)

			return
		}

		errc <- fn()
	}()

	return <-errc
}

// Outer is the network namespace the test binary was started in, where the machine's own links
// are (/proc/PID/ns/net of the process Isolate re-ran it from), or "" when the tests run there.
func Outer() string {
	if os.Getenv(envIsolated) == "" {
		return ""
	}

	return fmt.Sprintf("/proc/%d/ns/net", os.Getppid())
}
