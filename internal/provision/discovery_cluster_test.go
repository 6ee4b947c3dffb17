package provision_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientpb "github.com/siderolabs/discovery-api/api/v1alpha1/client/pb"
	discovery "github.com/siderolabs/discovery-client/pkg/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/testenv"
)

// The discovery service cluster create starts: the nodes' configs name it, it answers a real
// discovery client (Hello, then the affiliates' updates and the list of them by Watch), its port
// is refused to a second service while it runs, and cluster destroy stops it.
func TestClusterDiscoveryService(t *testing.T) {
	root, err := os.MkdirTemp("", "pv") // short: the nodes' unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })

	var progress bytes.Buffer

	c, _, err := provision.Create(context.Background(), provision.Request{
		Name: "disc", ControlPlanes: 1, CIDR: netip.MustParsePrefix("127.5.61.0/24"),
		StateRoot: root, Binary: testenv.MachinedBinary(t), Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}

	t.Cleanup(func() { provision.Destroy(root, "disc", &progress) })

	if c.Discovery == nil || !strings.HasPrefix(c.Discovery.Endpoint, "http://127.5.61.1:") || !provision.ProcessRunning(c.Discovery.PID, c.Dir) {
		t.Fatalf("the cluster's discovery service: %+v", c.Discovery)
	}

	if !strings.Contains(progress.String(), "starting the discovery service at "+c.Discovery.Endpoint) {
		t.Fatalf("no progress line for the discovery service:\n%s", progress.String())
	}

	cfg, err := configloader.NewFromFile(c.Nodes[0].Config)
	if err != nil {
		t.Fatal(err)
	}

	if d := cfg.Cluster().Discovery(); !d.Enabled() || !d.Registries().Service().Enabled() || d.Registries().Service().Endpoint() != c.Discovery.Endpoint {
		t.Fatalf("the node's config names discovery %v at %s, want the cluster's %s", d.Enabled(), d.Registries().Service().Endpoint(), c.Discovery.Endpoint)
	}

	addr := netip.MustParseAddrPort(strings.TrimSuffix(strings.TrimPrefix(c.Discovery.Endpoint, "http://"), "/"))

	// Two affiliates of one cluster, as two nodes would be: each lists the other.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	block, err := aes.NewCipher(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}

	clusterID := rand.Text()
	notify := make(chan struct{}, 1)

	var clients []*discovery.Client

	for _, id := range []string{"node-a", "node-b"} {
		cl, err := discovery.NewClient(discovery.Options{
			Cipher: block, Endpoint: addr.String(), ClusterID: clusterID, AffiliateID: id,
			ClientVersion: "v1.11.0", Insecure: true, TTL: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}

		if err = cl.SetLocalData(&discovery.Affiliate{Affiliate: &clientpb.Affiliate{NodeId: id, Hostname: id + ".test"}}, nil); err != nil {
			t.Fatal(err)
		}

		errCh := make(chan error, 1)
		go func() { errCh <- cl.Run(ctx, zap.NewNop(), notify) }()
		t.Cleanup(func() { cancel(); <-errCh })

		clients = append(clients, cl)
	}

	for {
		a, b := clients[0].GetAffiliates(), clients[1].GetAffiliates()
		if len(a) == 1 && a[0].Affiliate.Hostname == "node-b.test" && len(b) == 1 && b[0].Affiliate.Hostname == "node-a.test" {
			break
		}

		select {
		case <-notify:
		case <-ctx.Done():
			t.Fatalf("the affiliates did not list each other (%d, %d listed); discovery.log:\n%s", len(a), len(b), provision.TailFile(filepath.Join(c.Dir, "discovery.log"), 4<<10))
		}
	}

	// While it runs, its port is refused to another cluster's service, naming the way out.
	if ln, err := provision.ListenDiscovery(addr); err == nil {
		ln.Close()
		t.Fatal("a second discovery service got the running one's port")
	} else if !strings.Contains(err.Error(), "--discovery-endpoint") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("the refusal does not name the cause and the way out: %v", err)
	}

	if err = provision.Destroy(root, "disc", &progress); err != nil {
		t.Fatal(err)
	}

	if provision.ProcessRunning(c.Discovery.PID, c.Dir) {
		t.Fatal("the discovery service outlived cluster destroy")
	}

	if conn, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the discovery service's port still answers after cluster destroy")
	}

	// The port is free again for the next cluster's service.
	ln, err := provision.ListenDiscovery(addr)
	if err != nil {
		t.Fatal(err)
	}

	ln.Close()
}

// --with-cluster-discovery=false: the configs turn discovery off and no service is started;
// --discovery-endpoint: the configs name that service and none is started. A user's patch that
// names a service wins over the cluster's.
func TestClusterDiscoveryChoices(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     provision.Request
		enabled bool
		want    string
	}{
		{"off", provision.Request{NoClusterDiscovery: true}, false, ""},
		{"endpoint", provision.Request{DiscoveryEndpoint: "https://discovery.example.test/"}, true, "https://discovery.example.test/"},
		{"patch wins", provision.Request{DiscoveryEndpoint: "http://10.9.9.9:3000/", Patches: []string{
			`{"cluster": {"discovery": {"registries": {"service": {"endpoint": "https://mine.example.test/"}}}}}`,
		}}, true, "https://mine.example.test/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			req := tc.req
			// The nodes exit at once (/bin/true): only the configs and the cluster's state count.
			req.Name, req.ControlPlanes, req.Workers, req.CIDR, req.StateRoot, req.Binary = "dc", 1, 1, netip.MustParsePrefix("127.5.62.0/24"), root, "/bin/true"

			c, _, err := provision.Create(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}

			if c.Discovery != nil {
				t.Fatalf("a discovery service was started: %+v", c.Discovery)
			}

			if _, err = os.Stat(filepath.Join(c.Dir, "discovery.log")); !os.IsNotExist(err) {
				t.Fatalf("discovery.log in the cluster's folder: %v", err)
			}

			for _, n := range c.Nodes {
				cfg, err := configloader.NewFromFile(n.Config)
				if err != nil {
					t.Fatal(err)
				}

				d := cfg.Cluster().Discovery()
				if d.Enabled() != tc.enabled || (tc.enabled && d.Registries().Service().Endpoint() != tc.want) {
					t.Fatalf("%s: discovery %v at %s, want %v at %s", n.Name, d.Enabled(), d.Registries().Service().Endpoint(), tc.enabled, tc.want)
				}
			}

			if err = provision.Destroy(root, "dc", io.Discard); err != nil {
				t.Fatal(err)
			}
		})
	}
}
