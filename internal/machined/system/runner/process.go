// Package runner holds the ways a supervised service runs: as a child process, as a goroutine
// inside machined, or as a container of machined's containerd (system namespace).
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/sandbox"
)

// DefaultGracefulTimeout is how long a process gets between SIGTERM and SIGKILL.
const DefaultGracefulTimeout = 10 * time.Second

// Process runs a service as a child process in its own process group.
type Process struct {
	Args            []string
	Env             []string // appended to a minimal environment
	Dir             string
	Output          io.Writer // stdout and stderr
	GracefulTimeout time.Duration
	// Sandbox, when set, confines the process's filesystem access (Landlock); a kernel without
	// Landlock runs it unconfined and says so in its log.
	Sandbox *sandbox.Policy
	// TimerSlack, when set, is the process's timer slack (PR_SET_TIMERSLACK): how late the
	// kernel may end its sleeps to batch wake-ups. Go's runtime wakes a monitor thread every
	// 20 µs while a process is busy; on a virtual machine where each wake-up costs a context
	// switch, a latency-bound relay (apid) spends a third of its CPU on them.
	TimerSlack time.Duration
	// OOMScoreAdj, when set, is the process's oom_score_adj (upstream's per service: containerd
	// -999, apid, trustd and etcd -998).
	OOMScoreAdj int
	// Cgroup, when set, is the process's cgroup (container and metal nodes, which have their own).
	Cgroup *Cgroup
	// Log takes what is worth a debug line only (an oom_score_adj this process may not lower).
	Log *zap.Logger
}

func (p *Process) String() string {
	return fmt.Sprintf("Process(%q)", strings.Join(p.Args, " "))
}

// start starts cmd, confined when the process has a sandbox policy, and returns the channel
// that receives its exit.
func (p *Process) start(cmd *exec.Cmd) (<-chan error, error) {
	if p.Sandbox == nil && p.TimerSlack == 0 {
		if err := cmd.Start(); err != nil {
			return nil, err
		}

		exited := make(chan error, 1)

		go func() { exited <- cmd.Wait() }()

		return exited, nil
	}

	confine := p.Sandbox != nil
	prepare := func() error {
		if p.TimerSlack > 0 {
			if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(p.TimerSlack.Nanoseconds()), 0, 0, 0); err != nil {
				return fmt.Errorf("setting timer slack: %w", err)
			}
		}

		if confine {
			return sandbox.RestrictThread(*p.Sandbox)
		}

		return nil
	}

	exited, err := sandbox.StartOnThread(cmd, prepare)
	if confine && errors.Is(err, sandbox.ErrUnsupported) {
		if p.Output != nil {
			fmt.Fprintf(p.Output, "sandbox: %v: %s runs unconfined\n", err, p.Args[0])
		}

		confine = false
		exited, err = sandbox.StartOnThread(cmd, prepare)
	}

	return exited, err
}

// Run starts the process and waits for it. When ctx ends, the process group gets SIGTERM and,
// after the graceful timeout, SIGKILL.
func (p *Process) Run(ctx context.Context) error {
	if len(p.Args) == 0 {
		return errors.New("process runner: no command")
	}

	cmd := exec.Command(p.Args[0], p.Args[1:]...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, p.Env...)
	cmd.Dir = p.Dir
	cmd.Stdout = p.Output
	cmd.Stderr = p.Output
	// Own process group, so a stop reaches the children too; die with machined.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	exited, err := p.start(cmd)
	if err != nil {
		return fmt.Errorf("starting %s: %w", p.Args[0], err)
	}

	p.applyResources(cmd.Process.Pid)

	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("process %s: %w", p.Args[0], err)
		}

		return nil
	case <-ctx.Done():
	}

	timeout := p.GracefulTimeout
	if timeout == 0 {
		timeout = DefaultGracefulTimeout
	}

	// Kill fails only when the group is already gone, and then exited is closed too; the
	// exit status of a process we are stopping is not news.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)

	select {
	case _ = <-exited:
		return nil
	case <-time.After(timeout):
	}

	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = <-exited

	return nil
}

// Goroutine runs a service as a function inside machined; Main must return when ctx ends.
type Goroutine struct {
	Name   string
	Main   func(ctx context.Context, output io.Writer) error
	Output io.Writer
}

func (g *Goroutine) String() string { return fmt.Sprintf("Goroutine(%q)", g.Name) }

// Run calls Main, turning a panic into an error so one service cannot take machined down.
func (g *Goroutine) Run(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("goroutine %s panicked: %v", g.Name, r)
		}
	}()

	out := g.Output
	if out == nil {
		out = io.Discard
	}

	return g.Main(ctx, out)
}
