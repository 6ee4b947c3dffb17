package talosctl

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestIntegrationDashboardTmux drives the dashboard in a real terminal (tmux) against a
// process-mode cluster of two nodes: the first node's hostname, version and a service show,
// → switches to the second node; F2 shows the Monitor screen with the node's machined in the
// process table (j scrolls it), F3 the Network Config screen with the node's address and
// hostname; F1 returns to the summary and q quits. On the same cluster, support collects both nodes
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

	var hostnames, addresses []string

	for _, n := range nodes {
		hostnames = append(hostnames, strings.TrimSpace(cli.Must(t, "-n", n, "get", "hostnamestatus", "-o", "jsonpath={.spec.hostname}")))

		// The node's own global address (its network namespace's, not the API's loopback one).
		addr := ""

		for _, a := range strings.Fields(cli.Must(t, "-n", n, "get", "addressstatuses", "-o", "jsonpath={.spec.address}")) {
			if p, err := netip.ParsePrefix(a); err == nil && p.Addr().IsGlobalUnicast() && addr == "" {
				addr = a
			}
		}

		if addr == "" {
			t.Fatalf("%s has no global address", n)
		}

		addresses = append(addresses, addr)
	}

	tag := ""

	for _, line := range strings.Split(cli.Must(t, "-n", nodes[0], "version"), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "Tag:" {
			tag = f[1] // the server's, printed last
		}
	}

	machinedPID := ""

	for _, line := range strings.Split(cli.Must(t, "-n", nodes[0], "processes"), "\n") {
		// NODE PID STATE THREADS CPU-TIME VIRTMEM RESMEM LABEL COMMAND: machined's command is its path.
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(line, "/machined") {
			machinedPID = f[1]
		}
	}

	if machinedPID == "" {
		t.Fatalf("no machined in %s's processes", nodes[0])
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
	// Memory in MiB (meminfo's figures are KiB): no node here has less than 1000 MiB.
	screenLine(t, tmux, `Memory:    \d+ MiB / \d{4,} MiB`)
	// From the second sample on: rates from NetworkDeviceStats and DiskStats.
	screen("Network:   rx ", "/s, tx ", "Disk:      read ", "/s, write ")

	tmux("send-keys", "-t", "dash", "Right")
	screen("Host:      "+hostnames[1], "Node:      "+nodes[1], "Type:      worker", "Stage:     running, ready")

	tmux("send-keys", "-t", "dash", "h")
	screen("Host:      " + hostnames[0])

	// Monitor: upstream's process table, machined's row by its PID, and the system figures.
	tmux("send-keys", "-t", "dash", "F2")
	screen("F1: Summary", "F2: Monitor", "F3: Network Config", "PID  S    CPU%    MEM%", "Procs:   ", "Memory:  total ", "Load:    ", "Network: rx ")
	screenLine(t, tmux, `^\s*`+machinedPID+`\s+[RSD]\s+[0-9.]+\s+[0-9.]+\s+.*\s/\S*machined`)
	screen("Processes (1-")
	tmux("send-keys", "-t", "dash", "j")
	screen("Processes (2-")

	// Network Config: the node's links, its own address and hostname, from its resources.
	tmux("send-keys", "-t", "dash", "F3")
	screen("Read-only view", "Hostname:      "+hostnames[0], "Links", "Routes")
	screenLine(t, tmux, `^`+regexp.QuoteMeta(addresses[0])+`\s+\S+\s+inet`)

	tmux("send-keys", "-t", "dash", "Right")
	screen("Hostname:      " + hostnames[1])
	screenLine(t, tmux, `^`+regexp.QuoteMeta(addresses[1])+`\s+\S+\s+inet`)

	tmux("send-keys", "-t", "dash", "F1")
	screen("Host:      "+hostnames[1], "Stage:     ")

	tmux("send-keys", "-t", "dash", "q")
	screen("DASHBOARD-EXITED 0")

	supportAcrossNodes(t, cli, append(nodes, prefix+"9"))
}

// screenLine waits for a line of the tmux pane (inside its box borders) that matches re.
func screenLine(t *testing.T, tmux func(...string) string, re string) {
	t.Helper()

	rx := regexp.MustCompile(re)

	testenv.WaitFor(t, fmt.Sprintf("a line matching %q", re), 30*time.Second, func() error {
		pane := tmux("capture-pane", "-p", "-t", "dash")
		for _, line := range strings.Split(pane, "\n") {
			if rx.MatchString(strings.Trim(line, "│ ")) {
				return nil
			}
		}

		return fmt.Errorf("no line matches on screen:\n%s", pane)
	})
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
