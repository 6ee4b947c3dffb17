package server_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/testenv"
)

func etcdServiceHealthy(ctx context.Context, c *client.Client) error {
	resp, err := c.ServiceInfo(ctx, "etcd")
	if err != nil {
		return err
	}

	if len(resp) == 0 {
		return fmt.Errorf("no etcd service")
	}

	if s := resp[0]; s.Service.GetState() != "Running" || !s.Service.GetHealth().GetHealthy() {
		return fmt.Errorf("etcd service %s, healthy=%v: %s", s.Service.GetState(), s.Service.GetHealth().GetHealthy(), s.Service.GetHealth().GetLastMessage())
	}

	return nil
}

// TestEtcdThroughMachined: three machined control planes share one config (endpoint = the
// first); etcd waits for Bootstrap on the first, the others join and are promoted; the etcd
// service reports health; a second bootstrap is AlreadyExists, a worker's FailedPrecondition;
// status, members, snapshot, alarms, defrag, forfeit and leave work through the API.
func TestEtcdThroughMachined(t *testing.T) {
	if testing.Short() {
		t.Skip("starts machined and etcd processes")
	}

	testenv.EtcdNextToMachined(t)

	base := testenv.Loopback(77)
	addrs := []string{base + "1", base + "2", base + "3"}
	cfg := testenv.Config(t, mtype.TypeControlPlane, addrs[0])

	var (
		nodes   []*testenv.Node
		clients []*client.Client
	)

	for _, a := range addrs {
		n := testenv.StartNode(t, a, cfg)
		nodes = append(nodes, n)
		clients = append(clients, n.Client(t))
	}

	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("etcd log of %s:\n%s", n.Address, testenv.TailFile(filepath.Join(n.State, "EPHEMERAL", "log", "etcd.log"), 3000))
			}
		}
	})

	// A guard against hangs only: the polls below have their own limits.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Before bootstrap, etcd waits: not healthy, no data.
	testenv.WaitFor(t, "etcd service waiting", time.Minute, func() error {
		resp, err := clients[0].ServiceInfo(ctx, "etcd")
		if err != nil {
			return err
		}

		if len(resp) == 0 || resp[0].Service.GetState() != "Running" {
			return fmt.Errorf("etcd service not started: %v", resp)
		}

		return nil
	})

	if err := etcdServiceHealthy(ctx, clients[0]); err == nil {
		t.Fatal("etcd healthy before bootstrap")
	}

	if _, err := os.Stat(filepath.Join(nodes[0].State, "EPHEMERAL", "lib", "etcd", "member")); err == nil {
		t.Fatal("etcd data exists before bootstrap")
	}

	start := time.Now()

	if err := clients[0].Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	testenv.WaitFor(t, "three healthy voting members", 3*time.Minute, func() error {
		resp, err := clients[0].EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return err
		}

		members := resp.GetMessages()[0].GetMembers()
		if len(members) != 3 {
			return fmt.Errorf("%d members", len(members))
		}

		for _, m := range members {
			if m.GetIsLearner() {
				return fmt.Errorf("%s still a learner", m.GetHostname())
			}
		}

		for _, c := range clients {
			if err := etcdServiceHealthy(ctx, c); err != nil {
				return err
			}
		}

		return nil
	})
	t.Logf("bootstrap to three healthy voting members (through machined): %s", time.Since(start).Round(time.Millisecond))

	for i, c := range clients {
		err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("second bootstrap on node %d: got %v, want AlreadyExists", i+1, err)
		}
	}

	st, err := clients[1].EtcdStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}

	ms := st.GetMessages()[0].GetMemberStatus()
	if ms.GetMemberId() == 0 || ms.GetLeader() == 0 || ms.GetIsLearner() || ms.GetDbSize() == 0 {
		t.Fatalf("status: %v", ms)
	}

	rc, err := clients[0].EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}

	snap, err := io.ReadAll(rc)
	rc.Close()

	if err != nil || len(snap)%512 != 32 {
		t.Fatalf("snapshot: %d bytes, %v", len(snap), err)
	}

	alarms, err := clients[0].EtcdAlarmList(ctx)
	if err != nil || len(alarms.GetMessages()) != 1 || len(alarms.GetMessages()[0].GetMemberAlarms()) != 0 {
		t.Fatalf("alarms: %v %v", alarms, err)
	}

	if _, err := clients[0].EtcdAlarmDisarm(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := clients[2].EtcdDefragment(ctx); err != nil {
		t.Fatal(err)
	}

	// Whoever leads hands over.
	for _, c := range clients {
		resp, err := c.EtcdForfeitLeadership(ctx, &machine.EtcdForfeitLeadershipRequest{})
		if err != nil {
			t.Fatal(err)
		}

		if m := resp.GetMessages()[0].GetMember(); m != "" {
			t.Logf("leadership moved to %s", m)
		}
	}

	// Node 3 leaves: its etcd stops, its data is wiped, two members remain. Right after the
	// handovers the quorum check may still see an election: FailedPrecondition is tried again.
	testenv.WaitFor(t, "node 3 left", 30*time.Second, func() error {
		err := clients[2].EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{})
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("leave: %v", err)
		}

		return err
	})

	if _, err := os.Stat(filepath.Join(nodes[2].State, "EPHEMERAL", "lib", "etcd", "member")); err == nil {
		t.Fatal("etcd data remains after leave")
	}

	resp, err := clients[0].EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}

	if n := len(resp.GetMessages()[0].GetMembers()); n != 2 {
		t.Fatalf("%d members after leave, want 2", n)
	}

	// Removing a member that does not exist is refused.
	err = clients[0].EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: 0x1234})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("remove unknown member: got %v, want FailedPrecondition", err)
	}

	if _, err := clients[0].EtcdStatus(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdOnWorker: the etcd API refuses on a worker.
func TestEtcdOnWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts machined")
	}

	addr := testenv.Loopback(77) + "9"
	n := testenv.StartNode(t, addr, testenv.Config(t, mtype.TypeWorker, "127.77.0.250"))
	c := n.Client(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	testenv.WaitFor(t, "bootstrap refused on a worker", 30*time.Second, func() error {
		err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
		if status.Code(err) != codes.FailedPrecondition {
			return fmt.Errorf("got %w, want FailedPrecondition", err)
		}

		return nil
	})

	if _, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("member list on a worker: got %v", err)
	}
}
