package discovery

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestRegistryExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Registry{Now: func() time.Time { return now }}

	r.Exchange(Affiliate{NodeID: "a", Hostname: "node-b"})
	now = now.Add(TTL / 2)
	list := r.Exchange(Affiliate{NodeID: "b", Hostname: "node-a"})

	if len(list) != 2 || list[0].Hostname != "node-a" {
		t.Fatalf("want both, sorted: %+v", list)
	}

	now = now.Add(TTL + time.Second)
	if list = r.Exchange(Affiliate{NodeID: "c", Hostname: "node-c"}); len(list) != 1 {
		t.Fatalf("stale affiliates kept: %+v", list)
	}
}

func TestExchangeOverGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.5.50.1:0")
	if err != nil {
		t.Fatal(err)
	}

	srv := grpc.NewServer()
	Register(srv, &Registry{}, func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("token"); len(v) == 1 && v[0] == "secret" {
			return nil
		}
		return errors.New("no")
	})

	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx := context.Background()

	if _, err = Exchange(metadata.AppendToOutgoingContext(ctx, "token", "wrong"), conn, Affiliate{NodeID: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("wrong token: %v", err)
	}

	good := metadata.AppendToOutgoingContext(ctx, "token", "secret")
	if _, err = Exchange(good, conn, Affiliate{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty node id: %v", err)
	}

	Exchange(good, conn, Affiliate{NodeID: "1", Hostname: "cp"})

	list, err := Exchange(good, conn, Affiliate{NodeID: "2", Hostname: "worker", Addresses: []string{"127.0.0.9"}})
	if err != nil || len(list) != 2 || list[1].Addresses[0] != "127.0.0.9" {
		t.Fatalf("%+v %v", list, err)
	}
}

// harvestExtraEndpoints: an endpoint one node's KubeSpan reached another at is added to that
// node's endpoints for everyone, once, and goes when the observer's entry expires; a node's
// claims about itself and about nodes without KubeSpan add nothing.
func TestRegistryObservedEndpoints(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Registry{Now: func() time.Time { return now }}

	r.Exchange(Affiliate{NodeID: "b", Hostname: "b", KubeSpan: &KubeSpan{PublicKey: "kb", Endpoints: []string{"10.0.0.2:51820"}}})
	r.Exchange(Affiliate{NodeID: "c", Hostname: "c"})
	r.Exchange(Affiliate{NodeID: "a", Hostname: "a", Observed: map[string][]string{
		"b": {"203.0.113.5:40000", "10.0.0.2:51820"}, "c": {"203.0.113.6:51820"}, "a": {"198.51.100.1:1"},
	}})

	now = now.Add(TTL / 2)
	list := r.Exchange(Affiliate{NodeID: "b", Hostname: "b", KubeSpan: &KubeSpan{PublicKey: "kb", Endpoints: []string{"10.0.0.2:51820"}}})

	if len(list) != 3 || list[1].KubeSpan == nil || !slices.Equal(list[1].KubeSpan.Endpoints, []string{"10.0.0.2:51820", "203.0.113.5:40000"}) {
		t.Fatalf("b's endpoints: %+v", list)
	}

	if list[0].Observed != nil || list[2].KubeSpan != nil {
		t.Fatalf("observations are not passed on as such, nor make a KubeSpan peer: %+v", list)
	}

	// The stored entry stays as b sent it: another exchange adds the observation once.
	if list = r.Exchange(Affiliate{NodeID: "c", Hostname: "c"}); len(list[1].KubeSpan.Endpoints) != 2 {
		t.Fatalf("b's endpoints grew: %v", list[1].KubeSpan.Endpoints)
	}

	now = now.Add(TTL/2 + time.Second) // a's entry expires
	if list = r.Exchange(Affiliate{NodeID: "b", Hostname: "b", KubeSpan: &KubeSpan{PublicKey: "kb", Endpoints: []string{"10.0.0.2:51820"}}}); !slices.Equal(list[0].KubeSpan.Endpoints, []string{"10.0.0.2:51820"}) {
		t.Fatalf("an expired observer's endpoints kept: %+v", list)
	}
}
