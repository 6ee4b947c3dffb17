package etcd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/talos-go/talos/internal/testenv"
)

// TestSnapshotRecover: snapshot a member with data, recover into a fresh node with
// bootstrap --recover-from: the keys are intact, deleted keys stay deleted; a tampered
// snapshot and a recovery without a snapshot are refused.
func TestSnapshotRecover(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	src := newTestCluster(t, 1, caCert, caKey).nodes[0]
	src.start()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if err := src.m.Bootstrap(ctx, BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "source healthy", time.Minute, func() error { return src.m.Health(ctx) })

	cli, err := src.m.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	want := map[string]string{}

	for i := range 300 {
		k, v := fmt.Sprintf("/registry/item/%03d", i), fmt.Sprintf("value-%d", i)
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}

		want[k] = v
	}

	// Overwrite, delete, delete-then-recreate.
	if _, err := cli.Put(ctx, "/registry/item/000", "changed"); err != nil {
		t.Fatal(err)
	}

	want["/registry/item/000"] = "changed"

	if _, err := cli.Delete(ctx, "/registry/item/001"); err != nil {
		t.Fatal(err)
	}

	delete(want, "/registry/item/001")

	if _, err := cli.Delete(ctx, "/registry/item/002"); err != nil {
		t.Fatal(err)
	}

	if _, err := cli.Put(ctx, "/registry/item/002", "again"); err != nil {
		t.Fatal(err)
	}

	want["/registry/item/002"] = "again"

	rc, err := src.m.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}

	snap, err := io.ReadAll(rc)
	rc.Close()

	if err != nil {
		t.Fatal(err)
	}

	if !hasHash(int64(len(snap))) {
		t.Fatalf("snapshot of %d bytes carries no hash", len(snap))
	}

	// A fresh node.
	dst := newTestCluster(t, 1, caCert, caKey).nodes[0]

	if err := dst.m.Bootstrap(ctx, BootstrapOptions{Recover: true}); !errorIs(err, ErrNoSnapshot) {
		t.Fatalf("recover without snapshot: got %v, want ErrNoSnapshot", err)
	}

	tampered := bytes.Clone(snap)
	tampered[100] ^= 0xff

	if _, err := dst.m.ReceiveSnapshot(bytes.NewReader(tampered)); err != nil {
		t.Fatal(err)
	}

	if err := dst.m.Bootstrap(ctx, BootstrapOptions{Recover: true}); !errorIs(err, ErrSnapshotHash) {
		t.Fatalf("tampered snapshot: got %v, want ErrSnapshotHash", err)
	}

	n, err := dst.m.ReceiveSnapshot(bytes.NewReader(snap))
	if err != nil || n != int64(len(snap)) {
		t.Fatalf("receive: %d bytes, %v", n, err)
	}

	st, err := os.Stat(dst.opts.SnapshotPathOrDefault())
	if err != nil {
		t.Fatal(err)
	}

	if st.Mode().Perm() != 0o600 {
		t.Fatalf("uploaded snapshot mode %v, want 0600", st.Mode().Perm())
	}

	start := time.Now()

	if err := dst.m.Bootstrap(ctx, BootstrapOptions{Recover: true}); err != nil {
		t.Fatalf("bootstrap with recovery: %v", err)
	}

	dst.start()
	testenv.WaitFor(t, "recovered node healthy", time.Minute, func() error { return dst.m.Health(ctx) })
	t.Logf("recovery of %d keys: healthy after %s", len(want), time.Since(start).Round(time.Millisecond))

	dcli, err := dst.m.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	defer dcli.Close()

	resp, err := dcli.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}

	if len(got) != len(want) {
		t.Fatalf("recovered %d keys, want %d", len(got), len(want))
	}

	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %s: got %q, want %q", k, got[k], v)
		}
	}

	if _, err := os.Stat(dst.opts.SnapshotPathOrDefault()); !os.IsNotExist(err) {
		t.Fatalf("snapshot still on disk after recovery: %v", err)
	}

	// The recovered node is a cluster: a second bootstrap is refused.
	if err := dst.m.Bootstrap(ctx, BootstrapOptions{}); !errorIs(err, ErrAlreadyBootstrapped) {
		t.Fatalf("bootstrap after recovery: got %v", err)
	}

	// A copy of a stopped member's data folder (member/snap/db) carries no hash: it needs
	// the skip-hash-check option, and then recovers the same keys.
	src.stop()

	db, err := os.ReadFile(filepath.Join(src.opts.DataDir, "member", "snap", "db"))
	if err != nil {
		t.Fatal(err)
	}

	dst2 := newTestCluster(t, 1, caCert, caKey).nodes[0]

	if _, err := dst2.m.ReceiveSnapshot(bytes.NewReader(db)); err != nil {
		t.Fatal(err)
	}

	if err := dst2.m.Bootstrap(ctx, BootstrapOptions{Recover: true}); !errorIs(err, ErrSnapshotHash) {
		t.Fatalf("data folder copy without skip-hash-check: got %v, want ErrSnapshotHash", err)
	}

	if err := dst2.m.Bootstrap(ctx, BootstrapOptions{Recover: true, SkipHashCheck: true}); err != nil {
		t.Fatal(err)
	}

	dst2.start()
	testenv.WaitFor(t, "node recovered from a data folder copy healthy", time.Minute, func() error { return dst2.m.Health(ctx) })

	cli2, err := dst2.m.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()

	resp, err = cli2.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	if len(resp.Kvs) != len(want) {
		t.Fatalf("recovered %d keys from the data folder copy, want %d", len(resp.Kvs), len(want))
	}

	for _, kv := range resp.Kvs {
		if want[string(kv.Key)] != string(kv.Value) {
			t.Fatalf("key %s: got %q, want %q", kv.Key, kv.Value, want[string(kv.Key)])
		}
	}
}
