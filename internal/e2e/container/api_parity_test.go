package container

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/testenv"
)

// containerMayBeEmpty are the types a container control plane may hold none of: each is
// filled only by a config the suite's other tests apply and remove.
var containerMayBeEmpty = map[resource.Type]string{
	runtimeres.ExtensionStatusType: "no system extensions",
	runtimeres.MetaKeyType:         "no META key written",
	runtimeres.KmsgLogConfigType:   "only with a KmsgLogConfig document (TestKmsgLogConfigSendsKernelLog)",
	runtimeres.EventSinkConfigType: "only with talos.events.sink",
	k8s.NodeAnnotationSpecType:     "only with machine.nodeAnnotations",
	k8s.NodeCordonedSpecType:       "only while the node is cordoned (an upgrade)",
	k8s.NodeTaintSpecType:          "only with machine.nodeTaints, or a control plane's NoSchedule taint (none with cluster.allowSchedulingOnControlPlanes)",
	cri.SeccompProfileType:         "only with machine.seccompProfiles (TestSeccompProfileFromConfig, on the worker)",
	network.NfTablesChainType:      "only with a firewall config (NetworkDefaultActionConfig, NetworkRuleConfig), as upstream's",
}

// This file's name sorts first: the suite runs its tests in source order (testenv.KeepOrder),
// and these read both nodes before TestResetToMaintenance leaves the worker in maintenance mode.
//
// TestResourceParityOnKubernetes reads every resource the control plane of a running
// Kubernetes cluster publishes, through apid with the machinery client and through our
// `talosctl get -o yaml`, and checks each against machinery v1.11.0's definitions
// (testenv.ResourceParity).
func TestResourceParityOnKubernetes(t *testing.T) {
	ctx := t.Context()

	c, err := client.New(ctx, client.WithConfigFromFile(talosconfig))
	if err != nil {
		t.Fatal(err)
	}

	defer c.Close()

	defs := resources.For(configsupport.Container)

	counts := testenv.ResourceParity{
		State: c.COSI,
		YAML: func(typ resource.Type) (string, error) {
			out, stderr, code := talosctl(t, "-n", cp, "get", typ, "-o", "yaml")
			if code != 0 {
				return out, errors.New(stderr)
			}

			return out, nil
		},
		MayBeEmpty: containerMayBeEmpty,
	}.Check(client.WithNode(ctx, cp), t, defs)

	t.Logf("container control plane: %d types registered, %d checked (%d resources, %d enum values, %d required fields), %d excepted",
		counts.Types, counts.Checked, counts.Resources, counts.Enums, counts.Required, counts.Excepted)

	if counts.Checked+counts.Excepted != len(defs) {
		t.Errorf("%d types checked and %d excepted of %d registered", counts.Checked, counts.Excepted, len(defs))
	}
}

// TestDashboardOnKubernetes drives talosctl dashboard in a real terminal (tmux) against both
// nodes of the Kubernetes cluster: every panel shows the node's data (summary figures with
// rates, the CPU and memory graphs, machined's log), kubelet among the running services; on the
// worker, F2 (Monitor) shows its kubelet in the process table and F3 (Network Config) its
// address, with no error.
func TestDashboardOnKubernetes(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is not installed (.ci/run installs it): apt-get install tmux")
	}

	nodes := []string{cp, w}

	var hostnames []string

	for _, n := range nodes {
		hostnames = append(hostnames, strings.TrimSpace(must(t, "-n", n, "get", "hostnamestatus", "-o", "jsonpath={.spec.hostname}")))
	}

	socket := fmt.Sprintf("dash-%s", clusterName)
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-L", socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}

		return string(out)
	}

	shell := fmt.Sprintf("env HOME=%s TALOSCONFIG=%s TERM=xterm-256color %s -n %s dashboard -d 1s; echo DASHBOARD-EXITED $?; sleep 60",
		home, talosconfig, filepath.Join(binDir, "talosctl"), strings.Join(nodes, ","))
	// Wide enough that the summary's services line (seven on a Kubernetes node) is not wrapped.
	tmux("new-session", "-d", "-s", "dash", "-x", "320", "-y", "60", shell)

	t.Cleanup(func() { exec.Command("tmux", "-L", socket, "kill-server").Run() })

	panels := func(node, hostname string) {
		t.Helper()

		want := []*regexp.Regexp{
			regexp.MustCompile(`Node:\s+` + regexp.QuoteMeta(node)),
			regexp.MustCompile(`Host:\s+` + regexp.QuoteMeta(hostname)),
			regexp.MustCompile(`Version:\s+v\d+\.\d+`),
			regexp.MustCompile(`Uptime:\s+(\d+h)?(\d+m)?\d+s`),
			regexp.MustCompile(`Type:\s+(controlplane|worker)`),
			regexp.MustCompile(`Stage:\s+running, ready`),
			regexp.MustCompile(`CPU:\s+\d+\.\d%`),
			regexp.MustCompile(`Memory:\s+[1-9]\d* MiB / [1-9]\d* MiB`),
			regexp.MustCompile(`Processes: [1-9]\d*`),
			regexp.MustCompile(`Network:\s+rx \d[\d.]* \S+/s, tx \d[\d.]* \S+/s`),
			regexp.MustCompile(`Disk:\s+read \d[\d.]* \S+/s, write \d[\d.]* \S+/s`),
			regexp.MustCompile(`Addresses: .*` + regexp.QuoteMeta(node)),
			regexp.MustCompile(`Services: .*kubelet Running`),
			// The graphs: a percentage of each and their samples.
			regexp.MustCompile(`CPU \d+\.\d%`),
			regexp.MustCompile(`Memory \d+\.\d%`),
			regexp.MustCompile(`[▁▂▃▄▅▆▇█]{2,}`),
			// machined's log: its panel holds log lines, not an empty box.
			regexp.MustCompile(`machined logs[^\n]*\n(?:[^\n]*\n){0,40}?[│|]\s*\S.{20,}`),
		}

		showing(t, tmux, "dashboard panels of "+node, want)
	}

	panels(nodes[0], hostnames[0])

	tmux("send-keys", "-t", "dash", "Right")
	panels(nodes[1], hostnames[1])

	tmux("send-keys", "-t", "dash", "F2")
	showing(t, tmux, "Monitor screen of "+nodes[1], []*regexp.Regexp{
		regexp.MustCompile(`PID\s+S\s+CPU%\s+MEM%\s+VIRT\s+RES\s+TIME\+\s+THR\s+COMMAND`),
		regexp.MustCompile(`(?m)^│\s*\d+\s+[A-Z]\s+\d+\.\d\s+\d+\.\d\s.*kubelet`),
		regexp.MustCompile(`Load:\s+\d+\.\d\d`),
		regexp.MustCompile(`Memory:\s+total \d`),
	})

	tmux("send-keys", "-t", "dash", "F3")
	showing(t, tmux, "Network Config screen of "+nodes[1], []*regexp.Regexp{
		regexp.MustCompile(`Hostname:\s+` + regexp.QuoteMeta(hostnames[1])),
		regexp.MustCompile(`(?m)^│` + regexp.QuoteMeta(nodes[1]) + `/\d+\s+\S+\s+inet4`),
		regexp.MustCompile(`(?m)^│default\s+\S+\s+\S+\s+main`),
	})

	tmux("send-keys", "-t", "dash", "q")
	testenv.WaitFor(t, "dashboard exited", 30*time.Second, func() error {
		if pane := tmux("capture-pane", "-p", "-t", "dash"); !strings.Contains(pane, "DASHBOARD-EXITED 0") {
			return fmt.Errorf("still running:\n%s", pane)
		}

		return nil
	})
}

// showing waits until the dashboard's pane matches every pattern and shows no error.
func showing(t *testing.T, tmux func(...string) string, what string, want []*regexp.Regexp) {
	t.Helper()

	testenv.WaitFor(t, what, 60*time.Second, func() error {
		pane := tmux("capture-pane", "-p", "-t", "dash")
		for _, re := range want {
			if !re.MatchString(pane) {
				return fmt.Errorf("no %s on screen:\n%s", re, pane)
			}
		}

		if strings.Contains(pane, "error:") {
			return fmt.Errorf("an error on screen:\n%s", pane)
		}

		return nil
	})
}
