package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStartDiscovery: the endpoint is in the form nodes parse (http = plain gRPC) and serves the
// discovery API.
func TestStartDiscovery(t *testing.T) {
	endpoint := StartDiscovery(t)

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
