package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/provision"
	"github.com/talos-go/talos/internal/testenv"
)

// talosctl runs the CLI against the endpoint cp1.
func talosctl(t *testing.T, args ...string) (string, string, int) {
	return cli().Run(t, append([]string{"-e", cp1}, args...)...)
}

// nodeState returns the state folder (the disk) of the node at addr.
func nodeState(t *testing.T, addr string) string {
	t.Helper()

	c, err := provision.Load(filepath.Join(home, ".talos", "clusters"), clusterName)
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range c.Nodes {
		if n.Address == addr {
			return n.State
		}
	}

	t.Fatalf("no node at %s", addr)

	return ""
}

// servicePID returns the pid of service (machined, apid, trustd or etcd) on the node at addr,
// or 0 when it does not run. Only processes of this suite count: their paths are under home.
func servicePID(service, addr string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	onNode := regexp.MustCompile(`(^|[\s=/])` + regexp.QuoteMeta(addr) + `([\s:]|$)`)

	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(data), home) {
			continue
		}

		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if !onNode.MatchString(strings.Join(argv, " ")) {
			continue
		}

		var match bool

		switch service {
		case "machined":
			match = argv[0] == "machined"
		case "apid", "trustd":
			match = len(argv) > 1 && argv[1] == service
		case "etcd":
			match = filepath.Base(argv[0]) == "etcd"
		}

		if match {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))

			return pid
		}
	}

	return 0
}

// kill9 sends SIGKILL to service on the node; the service must be running.
func kill9(t *testing.T, service, addr string) {
	t.Helper()

	if !tryKill9(t, service, addr) {
		t.Fatalf("%s does not run on %s", service, addr)
	}
}

// tryKill9 sends SIGKILL to service on the node if it runs (a rebooting node may have none)
// and reports whether it did.
func tryKill9(t *testing.T, service, addr string) bool {
	t.Helper()

	pid := servicePID(service, addr)
	if pid == 0 {
		t.Logf("%s not running on %s: nothing to kill", service, addr)

		return false
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Logf("kill -9 %s (%d) on %s: %v (it ended meanwhile)", service, pid, addr, err)

		return false
	}

	t.Logf("kill -9 %s (pid %d) on %s", service, pid, addr)

	return true
}

var serviceRow = regexp.MustCompile(`(?m)^(\S+)\s+(apid|etcd|trustd)\s+(\S+)\s+(\S+)`)

// clusterHealthy reports whether every node answers through the endpoint with apid (and etcd and
// trustd on the control planes) running and healthy, and etcd has three started members.
func clusterHealthy(t *testing.T) error {
	out, stderr, code := talosctl(t, "-n", strings.Join(allNodes, ","), "services")
	if code != 0 {
		return fmt.Errorf("services: exit %d: %s", code, strings.TrimSpace(stderr))
	}

	ok := map[string]int{}

	for _, m := range serviceRow.FindAllStringSubmatch(out, -1) {
		if m[3] == "Running" && m[4] == "OK" {
			ok[m[1]]++
		}
	}

	for _, n := range allNodes {
		want := 3 // apid, etcd, trustd
		if n == w1 {
			want = 1 // apid: a worker runs no etcd or trustd
		}

		if ok[n] < want {
			return fmt.Errorf("node %s: %d of %d services running and healthy:\n%s", n, ok[n], want, out)
		}
	}

	out, stderr, code = talosctl(t, "-n", cp1, "etcd", "members")
	if code != 0 || len(etcdVoters(out)) != 3 {
		return fmt.Errorf("etcd members (want 3 started voting members): exit %d: %s%s", code, out, stderr)
	}

	return nil
}

// etcdVoters returns the peer URLs of the started voting members in `etcd members` output
// (NODE ID HOSTNAME PEER URLS CLIENT URLS LEARNER): a member added but not started has no
// client URL yet.
func etcdVoters(out string) []string {
	var peers []string

	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && strings.HasSuffix(f[3], ":2380") && strings.HasSuffix(f[4], ":2379") && f[5] == "false" {
			peers = append(peers, f[3])
		}
	}

	return peers
}

// awaitStage waits until the node's MachineStatus stage is stage (an upgrade or a reset sets
// upgrading or resetting while it runs).
func awaitStage(t *testing.T, node, stage string, bound time.Duration) {
	t.Helper()

	testenv.WaitFor(t, node+" in stage "+stage, bound, func() error {
		out, stderr, code := talosctl(t, "-n", node, "get", "machinestatus", "-o", "jsonpath={.spec.stage}")
		if got := strings.TrimSpace(out); code != 0 || got != stage {
			return fmt.Errorf("stage %q (exit %d %s)", got, code, strings.TrimSpace(stderr))
		}

		return nil
	})
}

// awaitHealthy polls clusterHealthy for up to bound and returns how long it took since since.
func awaitHealthy(t *testing.T, since time.Time, bound time.Duration) time.Duration {
	t.Helper()

	var last error

	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if last = clusterHealthy(t); last == nil {
			return time.Since(since)
		}
	}

	// What etcd and machined said on the control planes, to tell why.
	for _, n := range controlPlanes {
		for _, svc := range []string{"etcd", "machined"} {
			out, _, _ := talosctl(t, "-n", n, "logs", svc, "--tail", "25")
			t.Logf("%s %s log:\n%s", n, svc, out)
		}
	}

	t.Fatalf("cluster not healthy within %v of the fault: %v", bound, last)

	return 0
}

// etcdClient connects to the control planes' etcd with the client certificate of cp's machined.
func etcdClient(t *testing.T, cp string) *clientv3.Client {
	t.Helper()

	tlsConfig, err := etcd.CertPaths{Dir: filepath.Join(nodeState(t, cp), "system", "secrets", "etcd")}.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}

	var endpoints []string
	for _, n := range controlPlanes {
		endpoints = append(endpoints, etcd.ClientURL(n, 2379))
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

// putKeys writes n keys under prefix and returns them with their values.
func putKeys(t *testing.T, c *clientv3.Client, prefix string, n int) map[string]string {
	t.Helper()

	keys := map[string]string{}

	for i := range n {
		k, v := fmt.Sprintf("/faults/%s/%03d", prefix, i), fmt.Sprintf("value-%d-%d", i, rng.Uint64())

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, k, v)
		cancel()

		if err != nil {
			t.Fatalf("etcd put %s before the fault: %v", k, err)
		}

		keys[k] = v
	}

	return keys
}

// checkKeys reads every key back (linearizable reads, retried while etcd recovers).
func checkKeys(t *testing.T, c *clientv3.Client, keys map[string]string) {
	t.Helper()

	for k, want := range keys {
		testenv.WaitFor(t, "etcd key "+k+" readable", 30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()

			resp, err := c.Get(ctx, k)
			if err != nil {
				return err
			}

			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
				t.Fatalf("etcd key %s after the fault: %v, want %q", k, resp.Kvs, want)
			}

			return nil
		})
	}
}

// configAnnotation loads the node's machine config from its disk (a full parse and validation: a torn
// file fails here) and returns its machine.nodeAnnotations[name] (the live field the faults patch).
func configAnnotation(t *testing.T, addr, name string) string {
	t.Helper()

	path := filepath.Join(nodeState(t, addr), "STATE", "config.yaml")

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("machine config of %s: %v", addr, err)
	}

	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		t.Fatalf("machine config of %s on disk is torn or invalid: %v", addr, err)
	}

	return cfg.Machine().NodeAnnotations()[name]
}
