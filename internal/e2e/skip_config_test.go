package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// `cluster create --skip-injecting-config` starts the nodes without their configs, in
// maintenance mode, and writes the configs to the current folder; applying them there makes the
// cluster. A second create in that folder is refused before it makes anything.
func TestClusterCreateSkipInjectingConfig(t *testing.T) {
	h, cwd := t.TempDir(), t.TempDir()
	c := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: h, Timeout: 3 * time.Minute, Dir: cwd}

	const cp, worker = "127.5.44.2", "127.5.44.3"

	t.Cleanup(func() { c.Run(t, "cluster", "destroy", "--name", "skip") })

	out := c.Must(t, "cluster", "create", "--name", "skip", "--cidr", "127.5.44.0/24", "--skip-injecting-config")
	if !strings.Contains(out, "maintenance mode") || strings.Contains(out, "etcd bootstrap") {
		t.Errorf("create did not say the nodes wait for their configs, or bootstrapped:\n%s", out)
	}

	for _, name := range []string{"controlplane.yaml", "worker.yaml", "talosconfig"} {
		if fi, err := os.Stat(filepath.Join(cwd, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s in the current folder: %v", name, err)
		}
	}

	for _, node := range []string{cp, worker} {
		testenv.WaitFor(t, node+"'s maintenance API", time.Minute, func() error {
			if _, errOut, code := c.Run(t, "-n", node, "version", "--insecure"); code != 0 {
				return fmt.Errorf("exit %d: %s", code, errOut)
			}

			return nil
		})
	}

	c.Must(t, "-n", cp, "apply-config", "--insecure", "--file", "controlplane.yaml")
	c.Must(t, "-n", worker, "apply-config", "--insecure", "--file", "worker.yaml")

	tc := []string{"--talosconfig", filepath.Join(cwd, "talosconfig"), "-e", cp}

	testenv.WaitFor(t, "apid with the applied config", time.Minute, func() error {
		if _, errOut, code := c.Run(t, append(tc, "-n", cp, "bootstrap")...); code != 0 {
			return fmt.Errorf("bootstrap: exit %d: %s", code, errOut)
		}

		return nil
	})

	testenv.WaitFor(t, "etcd with the control plane", time.Minute, func() error {
		if out, errOut, code := c.Run(t, append(tc, "-n", cp, "etcd", "members")...); code != 0 || !strings.Contains(out, "https://"+cp+":2380") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	testenv.WaitFor(t, "the worker running its applied config", time.Minute, func() error {
		if out, errOut, code := c.Run(t, append(tc, "-n", worker, "get", "machinetype")...); code != 0 || !strings.Contains(out, "worker") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	_, errOut, code := c.Run(t, "cluster", "create", "--name", "skip2", "--cidr", "127.5.45.0/24", "--skip-injecting-config")
	if code == 0 || !strings.Contains(errOut, "controlplane.yaml") {
		t.Errorf("a second create over the configs: exit %d: %s", code, errOut)
	}

	if _, err := os.Stat(filepath.Join(h, ".talos", "clusters", "skip2")); !os.IsNotExist(err) {
		t.Errorf("the refused create made its cluster folder: %v", err)
	}
}
