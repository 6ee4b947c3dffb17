package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/testenv"
)

// startEtcd runs a one-member etcd on addr and returns its client URL.
func startEtcd(t *testing.T, addr string) string {
	t.Helper()

	client, peer := "http://"+addr+":2379", "http://"+addr+":2380"
	cmd := exec.Command(testenv.EtcdBinary(t), "--name", "n1", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "n1="+peer,
		"--log-level", "error")

	var out testenv.SyncBuffer

	cmd.Stdout, cmd.Stderr = &out, &out

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	exited := make(chan struct{})

	go func() { cmd.Wait(); close(exited) }()

	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	testenv.WaitFor(t, "etcd answering", time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()

		if _, err := cli.Status(ctx, client); err != nil {
			select {
			case <-exited:
				t.Fatalf("etcd exited: %s", out.String())
			default:
			}

			return fmt.Errorf("%w\n%s", err, out.String())
		}

		return nil
	})

	return client
}

// fakeEtcdNode is the etcd manager of one "control plane" in these tests. kill closes every
// client it handed out without releasing anything, as if the node's process ended.
type fakeEtcdNode struct {
	ep string

	mu      sync.Mutex
	clients []*clientv3.Client
}

func (f *fakeEtcdNode) ClusterClient(context.Context) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{f.ep}, DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}

	f.mu.Lock()
	f.clients = append(f.clients, cli)
	f.mu.Unlock()

	return cli, nil
}

func (f *fakeEtcdNode) Status(ctx context.Context) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{f.ep}, DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	return cli.Status(ctx, f.ep)
}

func (f *fakeEtcdNode) Leave(context.Context, func(context.Context) error) error {
	return errors.New("not in this test")
}

func (f *fakeEtcdNode) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()

	for _, c := range f.clients {
		c.Close()
	}
}

func TestClusterGuardLockAndQuorum(t *testing.T) {
	ep := startEtcd(t, "127.5.77.2")

	a := &ClusterGuard{Etcd: &fakeEtcdNode{ep: ep}}
	b := &ClusterGuard{Etcd: &fakeEtcdNode{ep: ep}}

	unlockA, err := a.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}

	// While a holds the lock b cannot take it.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = b.Lock(ctx, "b")

	cancel()

	if err == nil {
		t.Fatal("two holders of the upgrade lock")
	}

	var (
		mu    sync.Mutex
		order []string
	)

	got := make(chan func())

	go func() {
		unlock, err := b.Lock(context.Background(), "b")
		if err != nil {
			t.Error(err)
		}

		mu.Lock()
		order = append(order, "b locked")
		mu.Unlock()

		got <- unlock
	}()

	mu.Lock()
	order = append(order, "a unlocks")
	mu.Unlock()
	unlockA()

	(<-got)()

	if strings.Join(order, ",") != "a unlocks,b locked" {
		t.Fatalf("order %v", order)
	}

	// Rejoin records: written, listed, cleared.
	if err = a.MarkRejoining(context.Background(), "127.5.0.3"); err != nil {
		t.Fatal(err)
	}

	if nodes, err := b.Rejoining(context.Background()); err != nil || len(nodes) != 1 || nodes[0] != "127.5.0.3" {
		t.Fatalf("rejoining %v %v", nodes, err)
	}

	if err = b.Rejoined(context.Background(), "127.5.0.3"); err != nil {
		t.Fatal(err)
	}

	if nodes, err := a.Rejoining(context.Background()); err != nil || len(nodes) != 0 {
		t.Fatalf("rejoining after clearing %v %v", nodes, err)
	}

	// A single member: the cluster would have no voter left without it.
	if err = a.CheckHealthyWithout(context.Background()); !errors.Is(err, ErrLastMember) {
		t.Fatalf("single member: %v", err)
	}
}

// TestConcurrentControlPlaneUpgrades asks two control planes to upgrade at once: the second
// one stops its services only after the first has rebooted (its lock lapsed with its process).
func TestConcurrentControlPlaneUpgrades(t *testing.T) {
	ep := startEtcd(t, "127.5.77.3")

	var (
		mu  sync.Mutex
		log []string
	)

	type cp struct {
		e    *env
		etcd *fakeEtcdNode
	}

	nodes := map[string]*cp{}

	for _, name := range []string{"n1", "n2"} {
		e := newEnv(t, true)
		etcd := &fakeEtcdNode{ep: ep}
		e.m.Etcd = &ClusterGuard{Etcd: etcd, TTL: 5 * time.Second} // keepalives must survive a loaded machine
		e.m.Node = &loggingNode{recorder: e.rec, name: name, log: func(s string) {
			mu.Lock()
			log = append(log, s)
			mu.Unlock()
		}, onReboot: etcd.kill}
		nodes[name] = &cp{e: e, etcd: etcd}
	}

	var wg sync.WaitGroup

	for _, n := range nodes {
		wg.Add(1)

		go func() {
			defer wg.Done()

			if _, err := n.e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: n.e.image, Preserve: true}, "a"); err != nil {
				t.Error(err)
			}
		}()
	}

	wg.Wait()

	for _, n := range nodes {
		<-n.e.rec.done
	}

	mu.Lock()
	defer mu.Unlock()

	if len(log) != 4 || strings.Split(log[0], ".")[0] != strings.Split(log[1], ".")[0] || !strings.HasSuffix(log[1], "reboot") {
		t.Fatalf("upgrades interleaved: %v", log)
	}

	for _, n := range nodes {
		if !bootloader.SlotInstalled(filepath.Join(n.e.root, "BOOT"), slots.B) {
			t.Fatal("slot B not written")
		}
	}
}

type loggingNode struct {
	*recorder
	name     string
	log      func(string)
	onReboot func()
}

func (l *loggingNode) StopServices(ctx context.Context) error {
	l.log(l.name + ".stop")

	return l.recorder.StopServices(ctx)
}

func (l *loggingNode) Reboot() error {
	l.log(l.name + ".reboot")
	l.onReboot()

	return l.recorder.Reboot()
}
