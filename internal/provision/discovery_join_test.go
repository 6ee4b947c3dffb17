package provision_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/testenv"
)

// TestWorkerRenewsThroughDiscoveredControlPlane: with short-lived certificates, a worker keeps
// renewing its apid certificate after the control plane named in its config stops, through a
// control plane it learned of by discovery.
func TestWorkerRenewsThroughDiscoveredControlPlane(t *testing.T) {
	root, err := os.MkdirTemp("", "pv") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })

	var progress bytes.Buffer

	c, _, err := provision.Create(context.Background(), provision.Request{
		Name: "dj", ControlPlanes: 2, Workers: 1, CIDR: netip.MustParsePrefix("127.5.22.0/24"),
		StateRoot: root, Binary: testenv.MachinedBinary(t), Progress: &progress,
		NodeArgs: []string{"--cert-lifetime", "6s"},
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { provision.Destroy(root, "dj", &progress) })

	cp1, worker := c.Nodes[0], c.Nodes[2]
	crtPath := filepath.Join(worker.State, "system", "secrets", "apid", "server.crt")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	waitUntil := func(what string, cond func() bool) {
		t.Helper()

		for !cond() {
			select {
			case <-ctx.Done():
				log, _ := os.ReadFile(filepath.Join(c.Dir, worker.Name+".log"))
				t.Fatalf("timed out waiting for %s\n%s", what, log)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}

	waitUntil("worker certificates", func() bool { _, err := os.Stat(crtPath); return err == nil })

	sock := filepath.Join(worker.State, "system", "run", "machined", "machined.sock")

	cl, err := client.New(ctx, client.WithUnixSocket(sock), client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	waitUntil("the worker to discover both control planes", func() bool {
		members, err := safe.StateListAll[*cluster.Member](ctx, cl.COSI)

		return err == nil && members.Len() == 3
	})

	if err = cp1.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Two renewals after cp1 is gone: both can only come from cp2's trustd.
	for i := range 2 {
		before, _ := os.ReadFile(crtPath)

		waitUntil("a renewal without the configured control plane", func() bool {
			now, err := os.ReadFile(crtPath)

			return err == nil && len(now) > 0 && !bytes.Equal(now, before)
		})

		t.Logf("renewal %d after the configured control plane stopped", i+1)
	}
}
