package testenv

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/discoveryservice"
)

// StartDiscovery runs a discovery service (plain gRPC, no snapshot, upstream's limits except
// the rate) on a free loopback port for the test's life and returns its endpoint as
// "http://127.0.0.1:<port>/" (http: the node connects without TLS).
func StartDiscovery(t testing.TB) (endpoint string) {
	t.Helper()

	// Every client of a test comes from 127.0.0.1, which the per-address rate limit would
	// treat as one node sending for all of them.
	svc, err := discoveryservice.New(discoveryservice.Options{
		Limits: discoveryservice.Limits{RequestsPerSecond: 1000, Burst: 1000},
	})
	if err != nil {
		t.Fatalf("discovery service: %v", err)
	}

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("discovery service listener: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- svc.Serve(ctx, l, nil) }()

	t.Cleanup(func() {
		cancel()

		select {
		case err := <-done:
			if err != nil {
				t.Errorf("discovery service: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("discovery service did not stop within 10 s")
		}
	})

	return "http://" + l.Addr().String() + "/"
}

// localDiscovery is a discovery service on loopback for the test binary's life, named by the
// configs Config and Configs generate: their nodes would otherwise ask upstream's default,
// discovery.talos.dev, outside this machine. Clusters stay apart by their cluster IDs.
var localDiscovery = sync.OnceValues(func() (string, error) {
	svc, err := discoveryservice.New(discoveryservice.Options{
		Limits: discoveryservice.Limits{RequestsPerSecond: 1000, Burst: 1000},
	})
	if err != nil {
		return "", err
	}

	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}

	// Serves until the test binary exits.
	go svc.Serve(context.Background(), l, nil)

	return "http://" + l.Addr().String() + "/", nil
})
