package discoveryservice

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestExpiredAffiliateIsDeleted: an affiliate whose TTL ran out leaves List, and a watcher is
// told it was deleted, without anyone asking (the GC loop wakes at the expiry).
func TestExpiredAffiliateIsDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	r := serve(t, Options{}, nil)
	c := r.client(t)

	watch, err := c.Watch(ctx, &pb.WatchRequest{ClusterId: "c1"})
	if err != nil {
		t.Fatal(err)
	}

	first, err := watch.Recv()
	if err != nil || len(first.GetAffiliates()) != 0 {
		t.Fatalf("first watch message: %v, %v; want an empty snapshot", first, err)
	}

	if _, err = c.AffiliateUpdate(ctx, update("c1", "long", []byte("kept"), time.Minute)); err != nil {
		t.Fatal(err)
	}

	if _, err = c.AffiliateUpdate(ctx, update("c1", "short", []byte("ciphertext"), time.Second, []byte("ep"))); err != nil {
		t.Fatal(err)
	}

	for _, want := range []struct {
		id      string
		deleted bool
	}{{"long", false}, {"short", false}, {"short", true}} {
		msg, err := watch.Recv()
		if err != nil {
			t.Fatalf("waiting for %s (deleted %v): %v", want.id, want.deleted, err)
		}

		if len(msg.GetAffiliates()) != 1 || msg.GetAffiliates()[0].GetId() != want.id || msg.GetDeleted() != want.deleted {
			t.Fatalf("watch got %v, want %s with deleted %v", msg, want.id, want.deleted)
		}

		if want.deleted && msg.GetAffiliates()[0].GetData() != nil {
			t.Errorf("a deletion carries data: %v", msg)
		}
	}

	got := listed(ctx, t, c, "c1")
	if len(got) != 1 || got["long"] == nil {
		t.Errorf("List after expiry: %v, want only the affiliate with the long TTL", got)
	}
}

func TestSnapshotRestoresEverything(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	path := filepath.Join(t.TempDir(), "discovery.snapshot")

	r := serve(t, Options{SnapshotPath: path}, nil)
	c := r.client(t)

	want := map[string]map[string]*pb.Affiliate{}

	for _, cluster := range []string{"c1", "c2"} {
		want[cluster] = map[string]*pb.Affiliate{}

		for _, id := range []string{"a", "b", "c"} {
			a := &pb.Affiliate{Id: id, Data: []byte(cluster + id + "-ciphertext"), Endpoints: [][]byte{[]byte(id + "-ep1"), []byte(id + "-ep2")}}
			want[cluster][id] = a

			if _, err := c.AffiliateUpdate(ctx, update(cluster, id, a.Data, 10*time.Minute, a.Endpoints...)); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no snapshot after stop: %v", err)
	}

	if info.Mode().Perm() != 0o600 {
		t.Errorf("snapshot mode %v, want 0600", info.Mode().Perm())
	}

	r2 := serve(t, Options{SnapshotPath: path}, nil)
	c2 := r2.client(t)

	for cluster, affiliates := range want {
		got := listed(ctx, t, c2, cluster)
		if len(got) != len(affiliates) {
			t.Errorf("%s after restart: %d affiliates, want %d", cluster, len(got), len(affiliates))
		}

		for id, a := range affiliates {
			if got[id] == nil || !sameAffiliate(got[id], a) {
				t.Errorf("%s/%s after restart: %v, want %v", cluster, id, got[id], a)
			}
		}
	}

	// The expiries came back too: eleven minutes on, everything of a 10-minute TTL is gone.
	later, err := New(Options{SnapshotPath: path, Now: func() time.Time { return time.Now().Add(11 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}

	if _, affiliates, _ := later.store.counts(); affiliates != 0 {
		t.Errorf("a snapshot read 11 minutes later still holds %d affiliates of a 10-minute TTL", affiliates)
	}
}

func TestCorruptSnapshotIsRefused(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":      `{"version": 1, "clusters": [`,
		"other version": `{"version": 7}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "discovery.snapshot")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}

			_, err := New(Options{SnapshotPath: path})
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("New with a corrupt snapshot: %v, want an error naming %s", err, path)
			}
		})
	}
}

// TestAbuseIsRefused tries each way of making the server hold more than its limits, and checks
// the code, that the message names the limit, and that the affiliate already there is intact.
func TestAbuseIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	r := serve(t, Options{Limits: Limits{AffiliatesPerCluster: 3, EndpointsPerAffiliate: 4}}, nil)
	c := r.client(t)

	original := &pb.Affiliate{Id: "a1", Data: []byte("original-ciphertext"), Endpoints: [][]byte{[]byte("ep1"), []byte("ep2")}}
	if _, err := c.AffiliateUpdate(ctx, update("c1", "a1", original.Data, time.Minute, original.Endpoints...)); err != nil {
		t.Fatal(err)
	}

	many := [][]byte{[]byte("ep3"), []byte("ep4"), []byte("ep5")} // 2 + 3 > 4

	for _, tc := range []struct {
		name    string
		req     *pb.AffiliateUpdateRequest
		code    codes.Code
		mention []string
	}{
		{"oversize data", update("c1", "a1", bytes.Repeat([]byte{1}, 2049), time.Minute), codes.InvalidArgument, []string{"affiliate_data", "2048"}},
		{"oversize endpoint", update("c1", "a1", nil, time.Minute, bytes.Repeat([]byte{1}, 33)), codes.InvalidArgument, []string{"affiliate_endpoints[0]", "32"}},
		{"too many endpoints", update("c1", "a1", []byte("new"), time.Minute, many...), codes.ResourceExhausted, []string{"4 endpoints per affiliate"}},
		{"TTL over the limit", update("c1", "a1", []byte("new"), 31*time.Minute), codes.InvalidArgument, []string{"ttl", "30m0s"}},
		{"no TTL", update("c1", "a1", []byte("new"), 0), codes.InvalidArgument, []string{"ttl"}},
		{"long cluster ID", update(strings.Repeat("c", 257), "a1", nil, time.Minute), codes.InvalidArgument, []string{"cluster_id", "256"}},
		{"long affiliate ID", update("c1", strings.Repeat("a", 257), nil, time.Minute), codes.InvalidArgument, []string{"affiliate_id", "256"}},
		{"empty cluster ID", update("", "a1", nil, time.Minute), codes.InvalidArgument, []string{"cluster_id"}},
	} {
		_, err := c.AffiliateUpdate(ctx, tc.req)
		checkRefusal(t, tc.name, err, tc.code, tc.mention...)
	}

	for _, id := range []string{"a2", "a3"} {
		if _, err := c.AffiliateUpdate(ctx, update("c1", id, []byte(id), time.Minute)); err != nil {
			t.Fatalf("affiliate %s within the limit of 3: %v", id, err)
		}
	}

	_, err := c.AffiliateUpdate(ctx, update("c1", "a4", []byte("a4"), time.Minute))
	checkRefusal(t, "a fourth affiliate", err, codes.ResourceExhausted, "3 affiliates per cluster")

	got := listed(ctx, t, c, "c1")
	if len(got) != 3 || !sameAffiliate(got["a1"], original) {
		t.Errorf("after the refusals: %v; want a1 as it was (%v), a2 and a3", got, original)
	}

	metrics := scrape(t, r.svc)
	for _, line := range []string{
		`discovery_affiliates 3`, `discovery_clusters 1`,
		`discovery_rejections_total{reason="affiliates"} 1`, `discovery_rejections_total{reason="endpoints"} 1`,
		`discovery_rejections_total{reason="invalid"} 7`, `discovery_requests_total{method="AffiliateUpdate"} 12`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, metrics)
		}
	}
}

// TestClusterLimit: clusters holding affiliates count against Limits.Clusters, watchers of
// empty clusters do not (or they could lock real clusters out), and a cluster whose last
// affiliate left frees its place.
func TestClusterLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	r := serve(t, Options{Limits: Limits{Clusters: 2}}, nil)
	c := r.client(t)

	for _, id := range []string{"w1", "w2", "w3"} {
		w, err := c.Watch(ctx, &pb.WatchRequest{ClusterId: id})
		if err != nil {
			t.Fatal(err)
		}

		if _, err = w.Recv(); err != nil {
			t.Fatalf("watching %s: %v", id, err)
		}
	}

	for _, id := range []string{"c1", "c2"} {
		if _, err := c.AffiliateUpdate(ctx, update(id, "a", []byte("x"), time.Minute)); err != nil {
			t.Fatalf("cluster %s within the limit of 2 (3 empty clusters watched): %v", id, err)
		}
	}

	// Another affiliate in a held cluster is not a new cluster.
	if _, err := c.AffiliateUpdate(ctx, update("c1", "b", []byte("x"), time.Minute)); err != nil {
		t.Fatal(err)
	}

	_, err := c.AffiliateUpdate(ctx, update("c3", "a", []byte("x"), time.Minute))
	checkRefusal(t, "a third cluster", err, codes.ResourceExhausted, "limit of 2 clusters")

	for _, id := range []string{"a", "b"} {
		if _, err = c.AffiliateDelete(ctx, &pb.AffiliateDeleteRequest{ClusterId: "c1", AffiliateId: id}); err != nil {
			t.Fatal(err)
		}
	}

	if _, err = c.AffiliateUpdate(ctx, update("c3", "a", []byte("x"), time.Minute)); err != nil {
		t.Errorf("a cluster after c1 emptied: %v", err)
	}
}

// TestRequestFloodIsRefused: one source past its burst is refused, and its earlier writes stand.
// The clock stands still, so the bucket does not refill during the test.
func TestRequestFloodIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	frozen := time.Now()
	r := serve(t, Options{Now: func() time.Time { return frozen }, Limits: Limits{RequestsPerSecond: 1, Burst: 5}}, nil)
	c := r.client(t)

	if _, err := c.AffiliateUpdate(ctx, update("c1", "a1", []byte("data"), time.Minute, []byte("ep"))); err != nil {
		t.Fatal(err)
	}

	refused := 0

	for i := range 20 {
		_, err := c.AffiliateUpdate(ctx, update("c1", "a1", fmt.Appendf(nil, "flood-%d", i), time.Minute, []byte("flood-ep")))
		if err != nil {
			checkRefusal(t, "flood", err, codes.ResourceExhausted, "rate limit of 1 requests per second (burst 5)")

			refused++
		} else if i >= 4 {
			t.Errorf("request %d of the flood was served past the burst of 5", i+2)
		}
	}

	if refused != 16 {
		t.Errorf("%d of 20 requests refused, want 16 (burst 5, one spent before)", refused)
	}

	if !strings.Contains(scrape(t, r.svc), `discovery_rejections_total{reason="rate"} 16`+"\n") {
		t.Errorf("the rate refusals are not counted")
	}

	// What the refused requests carried was not applied: the affiliate is as the last
	// accepted request (flood-3) left it.
	if got := r.svc.store.list("c1", frozen); len(got) != 1 || string(got[0].data) != "flood-3" || len(got[0].endpoints) != 2 {
		t.Errorf("after the flood the store holds %+v, want a1 with data \"flood-3\" and endpoints ep, flood-ep", got)
	}
}

func checkRefusal(t *testing.T, what string, err error, code codes.Code, mention ...string) {
	t.Helper()

	st, _ := status.FromError(err)
	if err == nil || st.Code() != code {
		t.Errorf("%s: %v, want code %s", what, err, code)

		return
	}

	for _, m := range mention {
		if !strings.Contains(st.Message(), m) {
			t.Errorf("%s: %q does not mention %q", what, st.Message(), m)
		}
	}
}

func scrape(t *testing.T, svc *Service) string {
	t.Helper()

	rec := httptest.NewRecorder()
	svc.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))

	return rec.Body.String()
}
