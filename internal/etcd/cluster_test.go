package etcd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talos-go/talos/internal/testenv"
)

// TestClusterLifecycle: nothing starts before bootstrap; bootstrap on one node, the others join
// as learners and are promoted; a second bootstrap is refused; one member killed, writes still
// succeed; it comes back from its data; leave (with data wiped) and rejoin; remove by ID; a
// leave that would lose quorum is refused.
func TestClusterLifecycle(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	c := newTestCluster(t, 3, caCert, caKey)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]

	for _, n := range c.nodes {
		n.start()
	}

	// Nothing starts a cluster before Bootstrap.
	time.Sleep(1500 * time.Millisecond)

	for _, n := range c.nodes {
		if HasData(n.opts.DataDir) {
			t.Fatalf("%s has etcd data before bootstrap", n.opts.Name)
		}

		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_, err := n.m.Status(sctx)

		scancel()

		if err == nil {
			t.Fatalf("%s answers before bootstrap", n.opts.Name)
		}
	}

	// Certificates are private (they are written in the background: wait for them).
	testenv.WaitFor(t, "etcd certificates", 30*time.Second, func() error {
		_, err := os.Stat(CertPaths{Dir: n1.opts.SecretsDir}.Path(FilePeerCert))

		return err
	})

	for _, f := range []string{FileCA, FilePeerKey, FileServerKey, FileClientKey, FilePeerCert} {
		st, err := os.Stat(CertPaths{Dir: n1.opts.SecretsDir}.Path(f))
		if err != nil {
			t.Fatal(err)
		}

		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	// A guard against hangs only: each step below has its own, shorter wait.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()

	if err := n1.m.Bootstrap(ctx, BootstrapOptions{}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	// A second call on the same node is refused (before or after etcd started).
	if err := n1.m.Bootstrap(ctx, BootstrapOptions{}); !errorIs(err, ErrAlreadyBootstrapped) {
		t.Fatalf("second bootstrap: got %v, want ErrAlreadyBootstrapped", err)
	}

	t.Logf("bootstrap accepted after %s", time.Since(start))

	testenv.WaitFor(t, "three healthy voting members", 2*time.Minute, func() error { return c.votersHealthy(n1, 3) })
	t.Logf("bootstrap to three healthy voting members: %s", time.Since(start).Round(time.Millisecond))

	// Bootstrap anywhere else is refused now.
	for _, n := range c.nodes {
		err := n.m.Bootstrap(ctx, BootstrapOptions{})
		if !errorIs(err, ErrAlreadyBootstrapped) && !errorIs(err, ErrClusterExists) {
			t.Fatalf("bootstrap on %s of a running cluster: got %v", n.opts.Name, err)
		}
	}

	t.Logf("%s: killing member 3", time.Since(start).Round(time.Millisecond))

	// Kill one member: writes still succeed.
	n3.stop()

	cli, err := n1.m.ClusterClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if _, err := cli.Put(wctx, "/test/while-one-down", "yes"); err != nil {
		t.Fatalf("write with one member down: %v", err)
	}
	wcancel()

	// A leave by node2 now would leave one healthy voter of two: refused.
	if err := n2.m.Leave(ctx, n2.stopCtx); !errorIs(err, ErrQuorum) {
		t.Fatalf("leave with a member down: got %v, want ErrQuorum", err)
	}

	// The killed member comes back from its data and catches up.
	n3.start()
	testenv.WaitFor(t, "member 3 back", time.Minute, func() error { return c.votersHealthy(n1, 3) })

	resp, err := n3.m.LocalClient()
	if err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "member 3 sees the write", 30*time.Second, func() error {
		gctx, gcancel := context.WithTimeout(ctx, 3*time.Second)
		defer gcancel()

		r, err := resp.Get(gctx, "/test/while-one-down", clientv3.WithSerializable())
		if err != nil {
			return err
		}

		if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "yes" {
			return fmt.Errorf("got %v", r.Kvs)
		}

		return nil
	})
	resp.Close()

	t.Logf("%s: member 3 back; leaving", time.Since(start).Round(time.Millisecond))

	// Leave: node3 gives up its membership; its data is wiped.
	if err := n3.m.Leave(ctx, n3.stopCtx); err != nil {
		t.Fatalf("leave: %v", err)
	}

	if HasData(n3.opts.DataDir) {
		t.Fatal("data still present after leave")
	}

	testenv.WaitFor(t, "two members after leave", 30*time.Second, func() error { return c.votersHealthy(n1, 2) })

	t.Logf("%s: left; rejoining", time.Since(start).Round(time.Millisecond))

	// Rejoin after a reset: learner, then promoted.
	n3.m.Reset()
	n3.start()
	testenv.WaitFor(t, "member 3 rejoined", 2*time.Minute, func() error { return c.votersHealthy(n1, 3) })

	t.Logf("%s: rejoined; removing by ID", time.Since(start).Round(time.Millisecond))

	// Remove by ID: node3 killed, removed from node1.
	st3, err := n3.m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := n1.m.RemoveMember(ctx, mustStatus(t, n1).Header.MemberId); !errorIs(err, ErrInvalid) {
		t.Fatalf("removing own member by ID: got %v, want ErrInvalid", err)
	}

	// Hand leadership off first, so the two left need no election for the quorum check.
	if _, err := n3.m.ForfeitLeadership(ctx); err != nil {
		t.Logf("forfeit leadership before stopping member 3: %v (removal retries below)", err)
	}

	n3.stop()

	// The quorum check wants both remaining voters to see a leader: elections can still churn.
	testenv.WaitFor(t, "member 3 removed", 30*time.Second, func() error {
		err := n1.m.RemoveMember(ctx, st3.Header.MemberId)
		if err != nil && !errorIs(err, ErrQuorum) {
			t.Fatalf("remove member: %v", err)
		}

		return err
	})

	members, err := n1.m.Members(ctx, false)
	if err != nil {
		t.Fatal(err)
	}

	for _, mem := range members {
		if mem.ID == st3.Header.MemberId {
			t.Fatalf("member %x still listed after removal", mem.ID)
		}
	}

	if len(members) != 2 {
		t.Fatalf("%d members after removal, want 2", len(members))
	}

	// Forfeit leadership: whoever leads hands over. The leader may change between the look
	// and the call (an election), so both are tried again together.
	var newLeader string

	testenv.WaitFor(t, "leadership handed over", 30*time.Second, func() error {
		st := mustStatus(t, n1)

		leader := n1
		if st.Leader != st.Header.MemberId {
			leader = n2
		}

		name, err := leader.m.ForfeitLeadership(ctx)
		if err != nil {
			return err
		}

		if name == "" || name == leader.opts.Name {
			return fmt.Errorf("new leader %q", name)
		}

		newLeader = name

		return nil
	})

	t.Logf("%s: forfeited to %s; quorum refusal", time.Since(start).Round(time.Millisecond), newLeader)

	// With node1 down, node2 leaving would lose quorum.
	n1.stop()

	if err := n2.m.Leave(ctx, n2.stopCtx); !errorIs(err, ErrQuorum) {
		t.Fatalf("leave that loses quorum: got %v, want ErrQuorum", err)
	}

	t.Logf("%s: done", time.Since(start).Round(time.Millisecond))
}

func mustStatus(t *testing.T, n *testNode) *clientv3.StatusResponse {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	st, err := n.m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}

	return st
}
