package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStartDiscovery: the endpoint is in the form nodes parse (http = plain gRPC) and serves the
// discovery API.
func TestStartDiscovery(t *testing.T) {
	assertServesDiscovery(t, StartDiscovery(t))
}

// The configs testenv generates name a discovery service on loopback, never upstream's default
// outside this machine, and it answers.
func TestConfigsNameALocalDiscoveryService(t *testing.T) {
	_, cp, w := Configs(t, "127.0.0.1")

	for _, data := range [][]byte{cp, w, Config(t, machine.TypeWorker, "127.0.0.1")} {
		cfg, err := configloader.NewFromBytes(data)
		if err != nil {
			t.Fatal(err)
		}

		d := cfg.Cluster().Discovery()
		if !d.Enabled() || !d.Registries().Service().Enabled() {
			t.Fatalf("discovery off in a generated config: the service registry is what the nodes use")
		}

		assertServesDiscovery(t, d.Registries().Service().Endpoint())
	}
}

// assertServesDiscovery checks endpoint is in the form nodes parse (http = plain gRPC) on
// loopback and answers the discovery API.
func assertServesDiscovery(t *testing.T, endpoint string) {
	t.Helper()

	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Path != "/" {
		t.Fatalf("endpoint %q (%v), want http://127.0.0.1:<port>/", endpoint, err)
	}

	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}

	defer conn.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	resp, err := pb.NewClusterClient(conn).Hello(ctx, &pb.HelloRequest{ClusterId: "c1", ClientVersion: "v1.11.0"})
	if err != nil || len(resp.GetClientIp()) != 4 {
		t.Fatalf("Hello: %v, %v", resp, err)
	}
}
