package discoveryservice

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEndpointsExpireOnTheirOwn: an endpoint the node stopped sending goes at its own expiry,
// the affiliate stays, and watchers get the affiliate without it.
func TestEndpointsExpireOnTheirOwn(t *testing.T) {
	st := newStore(DefaultLimits())
	t0 := time.Now()

	if err := st.update("c", "a", []byte("d"), [][]byte{[]byte("old"), []byte("kept")}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	// The refresh repeats one endpoint and adds one; "old" keeps its first expiry.
	if err := st.update("c", "a", nil, [][]byte{[]byte("kept"), []byte("new"), []byte("new")}, t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}

	_, sub := st.subscribe("c", t0)

	st.collect(t0.Add(2 * time.Minute))

	got := st.list("c", t0.Add(2*time.Minute))
	if len(got) != 1 || !bytes.Equal(got[0].data, []byte("d")) || len(got[0].endpoints) != 2 ||
		string(got[0].endpoints[0]) != "kept" || string(got[0].endpoints[1]) != "new" {
		t.Fatalf("after the first endpoint's expiry: %+v, want data d and endpoints kept, new", got)
	}

	select {
	case ch := <-sub.ch:
		if ch.deleted || len(ch.endpoints) != 2 {
			t.Errorf("watcher got %+v, want the affiliate with two endpoints", ch)
		}
	default:
		t.Error("the watcher was not told of the expired endpoint")
	}
}

// TestLaggingWatcherIsCutOff: a watcher that does not take its changes is ended after
// subscriptionBuffer of them instead of making the server buffer without bound.
func TestLaggingWatcherIsCutOff(t *testing.T) {
	st := newStore(DefaultLimits())
	expires := time.Now().Add(time.Minute)

	_, sub := st.subscribe("c", time.Now())

	for i := range subscriptionBuffer + 1 {
		if err := st.update("c", "a", []byte{byte(i)}, nil, expires); err != nil {
			t.Fatal(err)
		}

		select {
		case <-sub.lost:
			if i != subscriptionBuffer {
				t.Fatalf("cut off after %d changes, want %d", i, subscriptionBuffer)
			}
		default:
			if i == subscriptionBuffer {
				t.Fatalf("still subscribed after %d changes", i+1)
			}
		}
	}

	if _, _, subs := st.counts(); subs != 0 {
		t.Errorf("%d subscriptions left after the cut-off", subs)
	}
}

// TestSnapshotIsWrittenAtTheInterval: the snapshot does not wait for the shutdown.
func TestSnapshotIsWrittenAtTheInterval(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	path := filepath.Join(t.TempDir(), "discovery.snapshot")
	r := serve(t, Options{SnapshotPath: path, SnapshotInterval: 50 * time.Millisecond}, nil)

	if _, err := r.client(t).AffiliateUpdate(ctx, update("c1", "written-while-running", []byte("x"), time.Minute)); err != nil {
		t.Fatal(err)
	}

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()

	for {
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte("written-while-running")) {
			return
		}

		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("no snapshot with the affiliate while the service runs")
		}
	}
}
