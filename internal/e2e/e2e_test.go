// Package e2e runs the seed's scenarios against a real local cluster: talosctl and node
// binaries built from this tree, nodes as machined processes on loopback addresses.
package e2e

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/testenv"
)

var (
	binDir      string
	home        string
	talosconfig string
	clusterName = "e2e"
	cidrPrefix  = "127.5.40."
)

// Node addresses of the cluster: three control planes and one worker.
var (
	cp1, cp2, cp3, w1 = cidrPrefix + "2", cidrPrefix + "3", cidrPrefix + "4", cidrPrefix + "5"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error

	if home, err = os.MkdirTemp("", "e2e-home-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)

	if binDir, err = testenv.Binaries(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testenv.RemoveBinaries()

	talosconfig = filepath.Join(home, ".talos", "config")

	start := time.Now()
	stdout, stderr, code := talosctl(nil, "cluster", "create", "--name", clusterName, "--controlplanes", "3", "--workers", "1",
		"--cidr", cidrPrefix+"0/24", "--wait-timeout", "3m")
	fmt.Fprintf(os.Stderr, "cluster create: exit %d in %s\n%s%s", code, time.Since(start).Round(time.Millisecond), stdout, stderr)

	defer func() {
		_, errOut, code := talosctl(nil, "cluster", "destroy", "--name", clusterName)
		if code != 0 {
			fmt.Fprintf(os.Stderr, "cluster destroy: %s\n", errOut)
		}
	}()

	if code != 0 {
		dumpLogs()
		return 1
	}

	rc := m.Run()
	if rc != 0 {
		dumpLogs()
	}

	return rc
}

func dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(home, ".talos", "clusters", clusterName, "*.log"))
	for _, l := range logs {
		fmt.Fprintf(os.Stderr, "==> %s <==\n%s\n", l, testenv.TailFile(l, 4000))
	}
}

// talosctl runs the built talosctl with the test's HOME and talosconfig.
func talosctl(t *testing.T, args ...string) (string, string, int) {
	if t == nil { // from TestMain: a nil *testing.T must not become a non-nil testing.TB
		return cli().Run(nil, args...)
	}

	return cli().Run(t, args...)
}

// must runs talosctl and fails the test on a non-zero exit.
func must(t *testing.T, args ...string) string {
	t.Helper()

	return cli().Must(t, args...)
}

func cli() testenv.CLI {
	return testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: home, TalosConfig: talosconfig, Timeout: 3 * time.Minute}
}

// rows returns the table rows (without header) whose first column is one of the nodes.
func rowsFor(out string, nodes ...string) map[string]string {
	rows := map[string]string{}

	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}

		for _, n := range nodes {
			if f[0] == n {
				rows[n] = line
			}
		}
	}

	return rows
}

func TestMemoryOneNode(t *testing.T) {
	out := must(t, "-e", cp1, "memory")
	if !strings.Contains(out, "TOTAL") || len(rowsFor(out, cp1)) != 1 {
		t.Fatalf("memory on the endpoint node:\n%s", out)
	}
}

func TestMemoryProxiedToOtherNode(t *testing.T) {
	out := must(t, "-e", cp1, "-n", cp2, "memory")
	if rows := rowsFor(out, cp2); len(rows) != 1 {
		t.Fatalf("memory through cp1 to cp2:\n%s", out)
	}
}

func TestMemoryManyNodesOneTable(t *testing.T) {
	out := must(t, "-e", cp1, "-n", strings.Join([]string{cp1, cp2, cp3}, ","), "memory")

	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "NODE") || len(lines) != 4 || len(rowsFor(out, cp1, cp2, cp3)) != 3 {
		t.Fatalf("want one table with a NODE column and 3 rows:\n%s", out)
	}
}

func TestServices(t *testing.T) {
	// Health checks run periodically: a check may still be pending (`?`) or catch an etcd
	// leader election, so poll until every one has passed.
	var out string

	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out = must(t, "-n", cp1, "services")

		healthy := 0

		for _, svc := range []string{"apid", "etcd", "trustd"} {
			if regexp.MustCompile(`(?m)^\S+\s+` + svc + `\s+Running\s+OK`).MatchString(out) {
				healthy++
			}
		}

		if healthy == 3 {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("apid, etcd and trustd not all running and healthy on cp1:\n%s", out)
		}
	}

	out = must(t, "-n", w1, "services")
	if !regexp.MustCompile(`(?m)\setcd\s+Skipped`).MatchString(out) && strings.Contains(out, "etcd") {
		t.Errorf("etcd should not run on a worker:\n%s", out)
	}
}

func TestLogs(t *testing.T) {
	out := must(t, "-n", cp1, "logs", "machined", "--tail", "20")
	if strings.Count(out, "\n") < 5 {
		t.Fatalf("machined logs too short:\n%s", out)
	}

	out = must(t, "-n", cp2+","+cp3, "logs", "apid", "--tail", "3")
	if !strings.Contains(out, cp2) || !strings.Contains(out, cp3) {
		t.Fatalf("logs from two nodes should be merged and labelled:\n%s", out)
	}
}

func TestGetAddressesAndMembers(t *testing.T) {
	out := must(t, "-n", cp2, "get", "nodeaddresses")
	if !strings.Contains(out, cp2+"/32") {
		t.Fatalf("node addresses of cp2:\n%s", out)
	}

	// Members arrive through the discovery exchange, a few seconds after boot.
	testenv.WaitFor(t, "every node in the members", 30*time.Second, func() error {
		out = must(t, "-n", cp1, "get", "members")

		for _, host := range []string{"e2e-controlplane-1", "e2e-controlplane-2", "e2e-controlplane-3", "e2e-worker-1"} {
			if !strings.Contains(out, host) {
				return fmt.Errorf("members lack %s:\n%s", host, out)
			}
		}

		return nil
	})
}

func TestEtcdMembers(t *testing.T) {
	out := must(t, "-n", cp1, "etcd", "members")
	for _, host := range []string{"e2e-controlplane-1", "e2e-controlplane-2", "e2e-controlplane-3"} {
		if !strings.Contains(out, host) {
			t.Errorf("etcd members lack %s:\n%s", host, out)
		}
	}
}

// Each command's answer is checked for what only the real answer holds: the node asked (its
// address in the row), and a value from that node.
func TestEverydayCommandsThroughApid(t *testing.T) {
	row := func(node string, cols ...string) string { // a table row: the node, then the columns
		return `(?m)^` + regexp.QuoteMeta(node) + `\s+` + strings.Join(cols, `\s+`) + `\s*$`
	}
	n2, nw := regexp.QuoteMeta(cp2), regexp.QuoteMeta(w1)

	for _, tc := range []struct {
		args []string
		want []string // regular expressions, each to match; one after "!" must not
	}{
		{[]string{"-n", cp2, "version"}, []string{`(?m)^Server:\n\s+NODE:\s+` + n2 + `\n\s+Tag:\s+v\d+\.\d+\.\d+`}},
		// The node's own etcd and apid, by their flags.
		{[]string{"-n", cp2, "processes"}, []string{
			row(cp2, `\d+`, `[RS]`, `.*/etcd --name=e2e-controlplane-2 .*`),
			row(cp2, `\d+`, `[RS]`, `.*/machined apid --listen `+n2+`:50000 .*`),
			`!/e2e-(controlplane-[13]|worker-1)/`, // nor another node's
		}},
		{[]string{"-n", cp2, "mounts"}, []string{row(cp2, "EPHEMERAL", `.*`, "/var"), row(cp2, "STATE", `.*`, "/system/state")}},
		{[]string{"-n", cp2, "ls", "/var/log"}, []string{row(cp2, `machined\.log`), row(cp2, `etcd\.log`)}},
		{[]string{"-n", cp2, "read", "/var/log/machined.log"}, []string{`node is running\s+\{"node": "` + n2 + `"`}},
		{[]string{"-n", cp2, "service", "apid"}, []string{`(?m)^NODE\s+` + n2 + `\nID\s+apid\nSTATE\s+Running\nHEALTH\s+OK$`}},
		{[]string{"-n", cp2, "get", "hostname", "-o", "yaml"}, []string{`(?ms)^node: ` + n2 + `$.*^\s+hostname: e2e-controlplane-2$`}},
		{[]string{"-n", cp2, "get", "etcdmembers"}, []string{row(cp2, "etcd", "EtcdMember", "local", `\d+`, `[0-9a-f]{16}`)}},
		{[]string{"-n", w1, "get", "machinetype"}, []string{row(w1, "config", "MachineType", "machine-type", `\d+`, "worker")}},
		{[]string{"-n", w1, "get", "cpus"}, []string{row(w1, "hardware", "Processor", "CPU_0", `\d+`, `.*`, `[1-9]\d*`, `[1-9]\d*`)}},
		{[]string{"-n", w1, "get", "systeminformation"}, []string{row(w1, "hardware", "SystemInformation", "systeminformation", `\d+.*`)}},
		{[]string{"-n", w1, "get", "disks", "-o", "yaml"}, []string{`(?ms)^node: ` + nw + `$.*^\s+dev_path: /dev/\w+$.*^\s+size: [1-9]\d*$`}},
		{[]string{"-n", cp2, "usage", "-d", "1", "/var"}, []string{row(cp2, `[1-9]\d*`, "/var/log"), row(cp2, `[1-9]\d*`, "/var")}},
		{[]string{"-n", cp1 + "," + cp2, "du", "/var/log"}, []string{row(cp1, `[1-9]\d*`, "/var/log"), row(cp2, `[1-9]\d*`, "/var/log")}},
	} {
		// Some resources (etcd members) are polled by their controllers: allow them a moment.
		testenv.WaitFor(t, "talosctl "+strings.Join(tc.args, " "), 20*time.Second, func() error {
			out := must(t, tc.args...)
			for _, re := range tc.want {
				not, ok := strings.CutPrefix(re, "!")
				if regexp.MustCompile(not).MatchString(out) == ok {
					return fmt.Errorf("want %s in\n%s", re, out)
				}
			}

			return nil
		})
	}
}

// A node's failure is an error naming the node, not a row: process-mode nodes run no
// containerd, so `image list` fails on each (with the header alone on stdout).
func TestNodeFailuresAreErrors(t *testing.T) {
	out, errOut, code := talosctl(t, "-n", cp1+","+cp2, "image", "list")
	if code == 0 || len(rowsFor(out, cp1, cp2)) != 0 {
		t.Fatalf("image list without containerd: exit %d, rows:\n%s", code, out)
	}

	for _, n := range []string{cp1, cp2} {
		if !strings.Contains(errOut, "error: "+n+": containerd is not running") {
			t.Errorf("no error for %s:\n%s", n, errOut)
		}
	}

	// --insecure (maintenance mode) to a node that has its config says to leave it out.
	_, errOut, code = talosctl(t, "-n", cp2, "get", "disks", "--insecure")
	if code == 0 || !strings.Contains(errOut, "out of maintenance mode, so leave out --insecure") {
		t.Fatalf("get --insecure of a configured node: exit %d\n%s", code, errOut)
	}
}

// TestCopyThroughApid: copy streams a .tar.gz through apid from another node.
func TestCopyThroughApid(t *testing.T) {
	dest := t.TempDir()
	must(t, "-n", cp2, "copy", "/var/log/machined.log", dest)

	data, err := os.ReadFile(filepath.Join(dest, "machined.log"))
	if err != nil || !strings.Contains(string(data), "node is running") {
		t.Fatalf("copied machined.log: %v\n%.300s", err, data)
	}

	// One node at a time, as upstream.
	if _, stderr, code := talosctl(t, "-n", cp1+","+cp2, "copy", "/var/log", dest); code == 0 || !strings.Contains(stderr, "one node") {
		t.Fatalf("copy from two nodes: code %d, %s", code, stderr)
	}
}

func TestReaderRoleFromConfigNew(t *testing.T) {
	readerCfg := filepath.Join(t.TempDir(), "reader")
	must(t, "-n", cp1, "config", "new", readerCfg, "--roles", "os:reader", "--crt-ttl", "1h")

	if out := must(t, "--talosconfig", readerCfg, "-e", cp1, "-n", cp1, "version"); !strings.Contains(out, "Tag:") {
		t.Fatalf("reader cannot read version:\n%s", out)
	}

	_, stderr, code := talosctl(t, "--talosconfig", readerCfg, "-e", cp1, "-n", cp1, "reboot", "--wait=false")
	if code == 0 || !strings.Contains(stderr, "PermissionDenied") && !strings.Contains(stderr, "os:operator") {
		t.Fatalf("reader must not reboot: exit %d\n%s", code, stderr)
	}
}

func TestInvalidConfigRefused(t *testing.T) {
	before := must(t, "-n", w1, "get", "machineconfig", "-o", "yaml")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v1alpha1\nmachine:\n  type: bogus\ncluster: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	_, stderr, code := talosctl(t, "-n", w1, "apply-config", "-f", bad)
	if code == 0 || !strings.Contains(stderr, "bogus") {
		t.Fatalf("invalid config: exit %d, stderr %s", code, stderr)
	}

	after := must(t, "-n", w1, "get", "machineconfig", "-o", "yaml")
	if stripVolatile(before) != stripVolatile(after) {
		t.Fatal("the node's config changed after a refused apply")
	}
}

var volatile = regexp.MustCompile(`(?m)^\s*(updated|created):.*$`)

func stripVolatile(s string) string { return volatile.ReplaceAllString(s, "") }

// stream runs a talosctl command that does not end by itself (events, logs -f, get --watch);
// its output so far is read with the returned function, and it is stopped when the test ends.
func stream(t *testing.T, args ...string) func() string {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())

	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "talosctl"), args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "TALOSCONFIG="+talosconfig, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))

	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		cancel()
		cmd.Wait()
	})

	return out.String
}

// waitOutput waits until every pattern matches the output of a streaming command.
func waitOutput(t *testing.T, what string, output func() string, patterns ...string) {
	t.Helper()

	testenv.WaitFor(t, what, 30*time.Second, func() error {
		for _, p := range patterns {
			if out := output(); !regexp.MustCompile(p).MatchString(out) {
				return fmt.Errorf("no match for %q in\n%s", p, out)
			}
		}

		return nil
	})
}

// processesOf returns the PIDs whose command line contains every part.
func processesOf(t *testing.T, parts ...string) []string {
	t.Helper()

	// Only this suite's processes: their paths are under its own HOME (another run of the suite,
	// in another network namespace, can have the same addresses).
	parts = append(parts, home)

	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}

	var pids []string

	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}

		line, match := strings.ReplaceAll(string(cmdline), "\x00", " "), true
		for _, p := range parts {
			match = match && strings.Contains(line, p)
		}

		if match {
			pids = append(pids, e.Name())
		}
	}

	return pids
}

// TestServicesAreConfined: apid, trustd and etcd run under a Landlock sandbox (which sets
// no_new_privs on them); machined itself does not.
func TestServicesAreConfined(t *testing.T) {
	noNewPrivs := func(pid string) string {
		status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
		if err != nil {
			return "gone" // a service's child that ended: checked again below
		}

		m := regexp.MustCompile(`(?m)^NoNewPrivs:\s+(\d)`).FindStringSubmatch(string(status))
		if m == nil {
			t.Skip("the kernel does not report NoNewPrivs")
		}

		return m[1]
	}

	for _, svc := range [][]string{
		{"apid", "--listen " + cp1 + ":50000"},
		{"trustd", "--listen " + cp1 + ":50001"},
		{"etcd", "--listen-peer-urls=https://" + cp1 + ":2380"},
	} {
		pids := processesOf(t, svc...)
		if len(pids) != 1 {
			t.Fatalf("%s on cp1: %d processes", svc[0], len(pids))
		}

		if got := noNewPrivs(pids[0]); got != "1" {
			t.Errorf("%s is not confined (NoNewPrivs %s)", svc[0], got)
		}
	}

	// The boot stage and machined under it.
	nodes := processesOf(t, "--platform container", "--address "+cp1+" ")
	if len(nodes) == 0 {
		t.Fatal("cp1's machined not found")
	}

	// A service's process between its fork and its exec still shows machined's command line,
	// already confined: one that is gone or another program a moment later was such a child.
	var confined []string

	for _, pid := range nodes {
		if got := noNewPrivs(pid); got == "1" {
			confined = append(confined, pid)
		}
	}

	if len(confined) > 0 {
		time.Sleep(500 * time.Millisecond)

		still := processesOf(t, "--platform container", "--address "+cp1+" ")

		for _, pid := range confined {
			if slices.Contains(still, pid) {
				t.Errorf("machined %s runs confined (NoNewPrivs 1): its services' sandbox leaked", pid)
			}
		}
	}
}

func TestHealth(t *testing.T) {
	// The default is the server-side check (etcd and Kubernetes on the node), then every node's API from here.
	_, stderr, code := talosctl(t, "-n", cp1, "health", "--wait-timeout", "1m",
		"--control-plane-nodes", strings.Join([]string{cp1, cp2, cp3}, ","), "--worker-nodes", w1)
	if code != 0 || !strings.Contains(stderr, "all services to be healthy: OK") || !strings.Contains(stderr, "etcd members to be control plane nodes: OK") {
		t.Fatalf("health: exit %d\n%s", code, stderr)
	}

	// Without nodes named, every cluster member is checked.
	_, stderr, code = talosctl(t, "health", "--wait-timeout", "1m")
	if code != 0 || !strings.Contains(stderr, "discovered 4 cluster members") || !strings.Contains(stderr, "all services to be healthy: OK") {
		t.Fatalf("health of the discovered members: exit %d\n%s", code, stderr)
	}
}

func TestServiceCommandsAndStreams(t *testing.T) {
	// service without an id lists every service, as upstream does.
	if out := must(t, "-n", cp2, "service"); !regexp.MustCompile(`(?m)\strustd\s+Running`).MatchString(out) {
		t.Fatalf("service without an id:\n%s", out)
	}

	// Each stream starts with a line of history, which shows it is established on the node
	// before the change is made.
	events := stream(t, "-n", cp2, "events", "--tail", "1")
	logs := stream(t, "-n", cp2, "logs", "-f", "machined", "--tail", "1")
	watch := stream(t, "-n", cp2, "get", "services", "--watch")

	waitOutput(t, "events", events, `(?m)^NODE\s+ID`)
	waitOutput(t, "logs -f", logs, `\S`)
	waitOutput(t, "get services --watch", watch, `trustd`)

	out := must(t, "-n", cp2, "service", "trustd", "restart")
	if !strings.Contains(out, "trustd") {
		t.Fatalf("service restart:\n%s", out)
	}

	waitOutput(t, "events", events, `(?s)ServiceStateEvent\s+\S*\s*trustd\s+(STOPPING|FINISHED).*ServiceStateEvent\s+\S*\s*trustd\s+RUNNING`)
	waitOutput(t, "logs -f", logs, `"service": "trustd".*Stopping`)

	// The restarted service comes back healthy.
	testenv.WaitFor(t, "trustd healthy after restart", 30*time.Second, func() bool {
		return regexp.MustCompile(`(?m)^HEALTH\s+OK`).MatchString(must(t, "-n", cp2, "service", "trustd"))
	})
}

func TestProcessesWatch(t *testing.T) {
	frames := stream(t, "-n", cp2, "processes", "--watch")

	// Two redraws of a table that lists machined.
	waitOutput(t, "processes --watch", frames, `(?s)\x1b\[H\x1b\[2J.*machined.*\x1b\[H\x1b\[2J.*machined`)
}

// TestKubeconfig: the admin kubeconfig from a control plane (as Talos sends it), written, then
// merged again with index-suffixed names; a worker has no Kubernetes CA key.
func TestKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	must(t, "-n", cp1, "kubeconfig", path)

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	var kc struct {
		Clusters []struct {
			Name    string `yaml:"name"`
			Cluster struct {
				Server string `yaml:"server"`
				CA     string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
		Users []struct {
			User struct {
				Crt string `yaml:"client-certificate-data"`
			} `yaml:"user"`
		} `yaml:"users"`
		Contexts []struct {
			Name string `yaml:"name"`
		} `yaml:"contexts"`
		Current string `yaml:"current-context"`
	}

	if err = yaml.Unmarshal(data, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig: %v\n%s", err, data)
	}

	if kc.Clusters[0].Cluster.Server != "https://"+cp1+":6443" || kc.Current != "admin@"+clusterName {
		t.Fatalf("kubeconfig server %q, context %q", kc.Clusters[0].Cluster.Server, kc.Current)
	}

	caPEM, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	crtPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Crt)

	pool := x509.NewCertPool()
	block, _ := pem.Decode(crtPEM)

	if !pool.AppendCertsFromPEM(caPEM) || block == nil {
		t.Fatal("kubeconfig lacks the CA or the client certificate")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = crt.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
		crt.Subject.CommonName != "admin" || len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "system:masters" {
		t.Fatalf("admin certificate %v %v: %v", crt.Subject.CommonName, crt.Subject.Organization, err)
	}

	// Merged again: the clashing names get an index suffix.
	must(t, "-n", cp1, "kubeconfig", path)

	if data, _ = os.ReadFile(path); !strings.Contains(string(data), "admin@"+clusterName+"-1") {
		t.Fatalf("second merge did not rename the clash:\n%s", data)
	}

	if _, stderr, code := talosctl(t, "-n", w1, "kubeconfig", filepath.Join(t.TempDir(), "w")); code == 0 || !strings.Contains(stderr, "control plane") {
		t.Fatalf("kubeconfig from a worker: exit %d\n%s", code, stderr)
	}
}

func TestPatchMachineConfig(t *testing.T) {
	// A field that takes effect live (machine.env needs a reboot, as upstream).
	patch := `[{"op": "add", "path": "/machine/nodeAnnotations", "value": {"e2e-patched": "yes"}}]`

	_, stderr, code := talosctl(t, "-n", w1, "patch", "machineconfig", "--mode", "no-reboot", "-p", patch)
	if code != 0 {
		t.Fatalf("patch: exit %d\n%s", code, stderr)
	}

	if out := must(t, "-n", w1, "get", "machineconfig", "-o", "yaml"); !strings.Contains(out, "e2e-patched: \"yes\"") && !strings.Contains(out, "e2e-patched: yes") {
		t.Fatalf("patched config not in effect:\n%s", out)
	}
}

// A reboot is a new boot: the node's boot ID (new at every start of machined) changes.
func TestRebootReturns(t *testing.T) {
	bootID := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`)

	before := must(t, "-n", w1, "read", "/proc/sys/kernel/random/boot_id")
	if !bootID.MatchString(before) {
		t.Fatalf("boot ID before the reboot: %q", before)
	}

	must(t, "-n", w1, "reboot", "--wait=true", "--timeout", "2m")

	after := must(t, "-n", w1, "read", "/proc/sys/kernel/random/boot_id")
	if !bootID.MatchString(after) || after == before {
		t.Fatalf("boot ID %q after the reboot, %q before: want a new one", after, before)
	}

	if out := must(t, "-n", w1, "version"); !regexp.MustCompile(`NODE:\s+` + regexp.QuoteMeta(w1)).MatchString(out) {
		t.Fatalf("worker did not come back:\n%s", out)
	}
}
