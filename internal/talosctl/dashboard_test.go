package talosctl

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestIntegrationDashboardTmux drives the dashboard in a real terminal (tmux) against a
// process-mode cluster of two nodes: the first node's hostname, version and a service show,
// → switches to the second node, q quits. On the same cluster, support collects both nodes
// and records a third, unreachable one without stopping.
func TestIntegrationDashboardTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (.ci/run installs it)")
	}

	if testing.Short() {
		t.Skip("starts a cluster")
	}

	home := isolate(t)

	binDir, err := testenv.Binaries()
	if err != nil {
		t.Fatal(err)
	}

	cli := testenv.CLI{
		Binary: filepath.Join(binDir, "talosctl"), Home: home,
		TalosConfig: filepath.Join(home, ".talos", "config"), Timeout: 4 * time.Minute,
	}

	const prefix = "127.5.24."

	cli.Must(t, "cluster", "create", "--name", "dash", "--controlplanes", "1", "--workers", "1",
		"--cidr", prefix+"0/24", "--wait-timeout", "3m")

	t.Cleanup(func() { cli.Run(t, "cluster", "destroy", "--name", "dash") })

	nodes := []string{prefix + "2", prefix + "3"}

	var hostnames []string

	for _, n := range nodes {
		hostnames = append(hostnames, strings.TrimSpace(cli.Must(t, "-n", n, "get", "hostnamestatus", "-o", "jsonpath={.spec.hostname}")))
	}

	tag := ""

	for _, line := range strings.Split(cli.Must(t, "-n", nodes[0], "version"), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "Tag:" {
			tag = f[1] // the server's, printed last
		}
	}

	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-L", "dash-" + filepath.Base(home)}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}

		return string(out)
	}

	shell := fmt.Sprintf("env HOME=%s TALOSCONFIG=%s TERM=xterm-256color %s -n %s dashboard -d 1s; echo DASHBOARD-EXITED $?; sleep 60",
		home, cli.TalosConfig, cli.Binary, strings.Join(nodes, ","))
	tmux("new-session", "-d", "-s", "dash", "-x", "200", "-y", "50", shell)

	t.Cleanup(func() { exec.Command("tmux", "-L", "dash-"+filepath.Base(home), "kill-server").Run() })

	screen := func(want ...string) {
		t.Helper()

		testenv.WaitFor(t, fmt.Sprintf("dashboard showing %q", want), 30*time.Second, func() error {
			pane := tmux("capture-pane", "-p", "-t", "dash")
			for _, w := range want {
				if !strings.Contains(pane, w) {
					return fmt.Errorf("no %q on screen:\n%s", w, pane)
				}
			}

			return nil
		})
	}

	screen("Host:      "+hostnames[0], "Version:   "+tag, "apid", "Node:      "+nodes[0], "CPU", "Type:      controlplane", "Stage:     running, ready")
	// From the second sample on: rates from NetworkDeviceStats and DiskStats.
	screen("Network:   rx ", "/s, tx ", "Disk:      read ", "/s, write ")

	tmux("send-keys", "-t", "dash", "Right")
	screen("Host:      "+hostnames[1], "Node:      "+nodes[1], "Type:      worker", "Stage:     running, ready")

	tmux("send-keys", "-t", "dash", "h")
	screen("Host:      " + hostnames[0])

	tmux("send-keys", "-t", "dash", "q")
	screen("DASHBOARD-EXITED 0")

	supportAcrossNodes(t, cli, append(nodes, prefix+"9"))
}

// supportAcrossNodes collects a support archive from the nodes, the last of which does not
// exist: the others' folders are complete, the missing one has its errors.txt.
func supportAcrossNodes(t *testing.T, cli testenv.CLI, nodes []string) {
	t.Helper()

	out := filepath.Join(t.TempDir(), "support.zip")

	_, stderr, code := cli.Run(t, "-n", strings.Join(nodes, ","), "support", "-O", out, "-w", "2")
	if code != 0 {
		t.Fatalf("support: code %d: %s", code, stderr)
	}

	files := readZip(t, out)
	live, dead := nodes[:len(nodes)-1], nodes[len(nodes)-1]

	for _, n := range live {
		for _, name := range []string{"version", "processes", "mounts", "machineconfig.yaml", "resources/HostnameStatuses.net.talos.dev.yaml", "service-logs/apid.log"} {
			if _, ok := files[n+"/"+name]; !ok {
				t.Errorf("%s/%s missing; errors:\n%s", n, name, files[n+"/errors.txt"])
			}
		}
	}

	mustContain(t, files[dead+"/errors.txt"], "version:")
	mustContain(t, stderr, dead+": 0 files")
}
