package testenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CLI runs a built talosctl as a user with their own HOME and talosconfig would, for the
// end-to-end suites.
type CLI struct {
	Binary      string        // the talosctl binary
	Home        string        // HOME (and XDG_CONFIG_HOME under it)
	TalosConfig string        // TALOSCONFIG
	ClusterRoot string        // when set, `cluster ...` commands get --state ClusterRoot
	Timeout     time.Duration // per command; a minute when zero
	Dir         string        // the working folder; the test's when empty
}

// Run runs talosctl and returns its stdout, stderr and exit code. A talosctl that cannot be
// run at all fails t, or gives code -1 when t is nil (from TestMain).
func (c CLI) Run(t testing.TB, args ...string) (string, string, int) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	if c.ClusterRoot != "" && len(args) > 0 && args[0] == "cluster" {
		args = append(args, "--state", c.ClusterRoot)
	}

	cmd := exec.CommandContext(ctx, c.Binary, args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "HOME="+c.Home, "TALOSCONFIG="+c.TalosConfig, "XDG_CONFIG_HOME="+filepath.Join(c.Home, ".config"))

	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	err := cmd.Run()

	exitErr := &exec.ExitError{}

	switch {
	case errors.As(err, &exitErr):
		return stdout.String(), stderr.String(), exitErr.ExitCode()
	case err != nil && t != nil:
		t.Fatalf("talosctl %v: %v", args, err)
	case err != nil:
		return stdout.String(), stderr.String(), -1
	}

	return stdout.String(), stderr.String(), 0
}

// Must runs talosctl and fails t on a non-zero exit; it returns stdout.
func (c CLI) Must(t testing.TB, args ...string) string {
	t.Helper()

	stdout, stderr, code := c.Run(t, args...)
	if code != 0 {
		t.Fatalf("talosctl %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}

	return stdout
}
