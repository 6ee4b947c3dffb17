package upgrade_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/talosctl"
	"github.com/talos-go/talos/internal/testenv"
)

// TestClusterRollingUpgrade creates a local cluster of three control planes running under the
// boot stage, bootstraps etcd, and upgrades the nodes from X to X+1 with talosctl through apid:
// one alone, then two asked at once (they take turns through the etcd upgrade lock). etcd keeps
// its data and members throughout, and talosctl version shows X+1 everywhere.
func TestClusterRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a cluster")
	}

	etcdBin := testenv.EtcdNextToMachined(t)
	binX := testenv.MachinedVersion(t, vX)
	im := makeImages(t, etcdBin)

	// Short: unix socket paths under the node folders must stay under 108 bytes.
	root, err := os.MkdirTemp("", "cu")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { os.RemoveAll(root) })

	var progress bytes.Buffer

	c, cfgs, err := provision.Create(context.Background(), provision.Request{
		Name: "upgrade", ControlPlanes: 3, CIDR: netip.MustParsePrefix("127.5.78.0/24"),
		StateRoot: root, Binary: binX, Progress: &progress,
		NodeArgs: []string{"boot", "--image-keys", im.pub},
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { provision.Destroy(root, "upgrade", &progress) })

	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("==== %s\n%s", n.Name, testenv.TailFile(filepath.Join(c.Dir, n.Name+".log"), 4000))
				t.Logf("==== %s etcd\n%s", n.Name, testenv.TailFile(filepath.Join(n.State, "EPHEMERAL", "log", "etcd.log"), 2000))
			}
		}
	})

	tc := filepath.Join(root, "talosconfig")
	if err = cfgs.Talosconfig.Save(tc); err != nil {
		t.Fatal(err)
	}

	nodes := make([]*bootNode, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i] = &bootNode{state: n.State, out: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
		nodes[i].waitSettled(t, vX)
	}

	// Bootstrap etcd on the first node and wait for three healthy members.
	bc := nodes[0].client(t)

	bctx, cancel := context.WithTimeout(context.Background(), time.Minute)

	// The socket answers before the boot has loaded the config.
	if err = testenv.AwaitConfig(bctx, bc); err != nil {
		t.Fatal(err)
	}

	if err = bc.Bootstrap(bctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	cancel()
	bc.Close()

	for _, n := range nodes {
		n.waitEtcdHealthy(t)
	}

	cli := etcdClient(t, c.Nodes[0].State, c.Nodes[0].Address, c.Nodes[1].Address, c.Nodes[2].Address)

	// Each etcd call gets its own deadline: the upgrades between them take minutes.
	kctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)

		return ctx
	}

	if _, err = cli.Put(kctx(), "/upgrade-test/key", "before"); err != nil {
		t.Fatal(err)
	}

	membersBefore := memberIDs(t, kctx(), cli)

	endpoint := c.Nodes[0].Address
	ctl := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer

		if code := talosctl.Execute(append([]string{"--talosconfig", tc, "-e", endpoint}, args...), &stdout, &stderr); code != 0 {
			return stdout.String(), fmt.Errorf("talosctl %v: %s", args, stderr.String())
		}

		return stdout.String(), nil
	}

	nodes[0].waitFor(t, "apid answering", func() (bool, string) {
		out, err := ctl("-n", endpoint, "version")
		if err != nil {
			return false, err.Error()
		}

		return strings.Contains(out, vX), out
	})

	upgrade := func(i int) {
		out, err := ctl("-n", c.Nodes[i].Address, "upgrade", "--image", im.good, "--preserve", "--wait=false")
		if err != nil || !strings.Contains(out, "upgrading to "+vX1) {
			t.Errorf("upgrading %s: %q %v", c.Nodes[i].Name, out, err)
		}
	}

	// The first node alone (the endpoint: apid comes back with it).
	upgrade(0)
	nodes[0].waitSettled(t, vX1)
	nodes[0].waitEtcdHealthy(t)

	// The other two asked at once: they upgrade one after the other.
	var wg sync.WaitGroup

	for _, i := range []int{1, 2} {
		wg.Add(1)

		go func() {
			defer wg.Done()
			upgrade(i)
		}()
	}

	wg.Wait()

	for _, i := range []int{1, 2} {
		nodes[i].waitSettled(t, vX1)
		nodes[i].waitEtcdHealthy(t)
	}

	for i, n := range nodes {
		if v := n.meta(t); v[meta.ActiveSlot] != "B" || v[meta.Fallback] != "" || v[meta.UpgradeTo] != vX1 {
			t.Fatalf("%s META after upgrade: %v", c.Nodes[i].Name, v)
		}
	}

	// Both waited for the lock; the one that got it second found the other back and healthy.
	waited := 0

	for _, i := range []int{1, 2} {
		if strings.Contains(testenv.TailFile(filepath.Join(c.Dir, c.Nodes[i].Name+".log"), 1<<20), "etcd upgrade lock taken") {
			waited++
		}
	}

	if waited != 2 {
		t.Fatalf("%d of 2 concurrent upgrades went through the etcd upgrade lock", waited)
	}

	// One after the other: the second took the lock only after the first had rebooted.
	logOf := func(i int) string { return filepath.Join(c.Dir, c.Nodes[i].Name+".log") }
	first, second := 1, 2

	if logTime(t, logOf(2), "etcd upgrade lock taken").Before(logTime(t, logOf(1), "etcd upgrade lock taken")) {
		first, second = 2, 1
	}

	if rebooted, locked := logTime(t, logOf(first), "rebooting into the new version"), logTime(t, logOf(second), "etcd upgrade lock taken"); !locked.After(rebooted) {
		t.Fatalf("upgrades overlapped: %s took the lock at %s, before %s rebooted at %s", c.Nodes[second].Name, locked, c.Nodes[first].Name, rebooted)
	}

	// etcd kept its data and its members.
	resp, err := cli.Get(kctx(), "/upgrade-test/key")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("etcd data after the upgrades: %v %v", resp, err)
	}

	if after := memberIDs(t, kctx(), cli); after != membersBefore {
		t.Fatalf("etcd members changed: %s -> %s", membersBefore, after)
	}

	// Without --preserve a control plane leaves etcd, wipes EPHEMERAL and joins again as a new
	// member; the cluster keeps its data.
	im2 := im.image(t, vX2)

	out, err := ctl("-n", c.Nodes[1].Address, "upgrade", "--image", im2, "--wait=false")
	if err != nil || !strings.Contains(out, "upgrading to "+vX2) {
		t.Fatalf("upgrade without --preserve: %q %v", out, err)
	}

	nodes[1].waitSettled(t, vX2)
	nodes[1].waitEtcdHealthy(t)

	if b := testenv.TailFile(filepath.Join(c.Dir, c.Nodes[1].Name+".log"), 1<<20); !strings.Contains(b, "EPHEMERAL wiped") || !strings.Contains(b, "left the cluster") {
		t.Fatal("upgrade without --preserve did not leave etcd and wipe EPHEMERAL")
	}

	resp, err = cli.Get(kctx(), "/upgrade-test/key")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("etcd data after a member rejoined: %v %v", resp, err)
	}

	if after := memberIDs(t, kctx(), cli); after == membersBefore || strings.Count(after, ",") != 2 {
		t.Fatalf("etcd members after a member rejoined: %s -> %s (want three, one new)", membersBefore, after)
	}

	// A graceful reset of a control plane that wipes EPHEMERAL leaves etcd first; after the
	// reboot the node joins again (its config in STATE is kept) and the data is still there.
	membersBefore = memberIDs(t, kctx(), cli)

	if _, err = ctl("-n", c.Nodes[2].Address, "reset", "--graceful", "--reboot", "--system-labels-to-wipe", "EPHEMERAL", "--wait=false"); err != nil {
		t.Fatal(err)
	}

	nodes[2].waitFor(t, "reset node rejoined etcd as a new member", func() (bool, string) {
		resp, err := cli.MemberList(kctx())
		if err != nil { // the reset node may be the one the client asks
			return false, err.Error()
		}

		ids := make([]string, 0, len(resp.Members))
		for _, m := range resp.Members {
			ids = append(ids, fmt.Sprintf("%x", m.ID))
		}

		joined := strings.Join(sortStrings(ids), ",")

		return joined != membersBefore && len(ids) == 3, joined
	})
	nodes[2].waitEtcdHealthy(t)

	if b := testenv.TailFile(filepath.Join(c.Dir, c.Nodes[2].Name+".log"), 1<<20); !strings.Contains(b, "left the cluster") || !strings.Contains(b, `"partition": "EPHEMERAL"`) {
		t.Fatal("graceful reset did not leave etcd and wipe EPHEMERAL")
	}

	resp, err = cli.Get(kctx(), "/upgrade-test/key")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("etcd data after a reset member rejoined: %v %v", resp, err)
	}

	// talosctl version through apid shows the new versions on every node.
	nodes[0].waitFor(t, "all nodes on "+vX1+" through apid", func() (bool, string) {
		out, err := ctl("-n", c.Nodes[0].Address+","+c.Nodes[1].Address+","+c.Nodes[2].Address, "version")
		if err != nil {
			return false, err.Error()
		}

		return strings.Count(out, vX1) == 2 && strings.Count(out, vX2) == 1, out
	})
}

func (n *bootNode) waitEtcdHealthy(t *testing.T) {
	t.Helper()

	n.waitFor(t, "etcd healthy", func() (bool, string) {
		c := n.client(t)
		defer c.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()

		resp, err := c.ServiceInfo(ctx, "etcd")
		if err != nil {
			return false, err.Error()
		}

		for _, s := range resp {
			return s.Service.GetState() == "Running" && s.Service.GetHealth().GetHealthy(), fmt.Sprint(s.Service)
		}

		return false, "no etcd service"
	})
}

func etcdClient(t *testing.T, state string, addrs ...string) *clientv3.Client {
	t.Helper()

	tlsCfg, err := etcd.CertPaths{Dir: filepath.Join(state, "system", "secrets", "etcd")}.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}

	var eps []string
	for _, a := range addrs {
		eps = append(eps, "https://"+a+":2379")
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { cli.Close() })

	return cli
}

func memberIDs(t *testing.T, ctx context.Context, cli *clientv3.Client) string {
	t.Helper()

	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}

	ids := make([]string, 0, len(resp.Members))
	for _, m := range resp.Members {
		ids = append(ids, fmt.Sprintf("%x", m.ID))
	}

	return strings.Join(sortStrings(ids), ",")
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}

	return s
}

// logTime is the time of the first line of a node's log that contains msg.
func logTime(t *testing.T, path, msg string) time.Time {
	t.Helper()

	b, _ := os.ReadFile(path)

	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, msg) {
			continue
		}

		// zap's ISO8601 layout: "Z" in UTC, a numeric offset elsewhere.
		if at, err := time.Parse("2006-01-02T15:04:05.000Z0700", strings.Fields(line)[0]); err == nil {
			return at
		}
	}

	t.Fatalf("%s: no timestamped line with %q", path, msg)

	return time.Time{}
}
