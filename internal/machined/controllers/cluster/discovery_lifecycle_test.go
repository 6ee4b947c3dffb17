package cluster_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/rtestutils"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/discoveryservice"
	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/testenv"
)

// serveDiscovery runs a discovery service on addr (127.0.0.1:0: a free port) keeping its state
// in the snapshot file; stop ends it as a restart would (it writes the last snapshot) and
// waits for it.
func serveDiscovery(t *testing.T, addr, snapshot string) (endpoint string, stop func()) {
	t.Helper()

	// Every node of the test comes from 127.0.0.1: the per-address rate limit would count
	// them as one.
	svc, err := discoveryservice.New(discoveryservice.Options{
		SnapshotPath: snapshot, Limits: discoveryservice.Limits{RequestsPerSecond: 1000, Burst: 1000},
	})
	require.NoError(t, err)

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	require.NoError(t, err, "listening on %s again (the restarted service must keep the nodes' endpoint)", addr)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- svc.Serve(ctx, l, nil) }()

	var once sync.Once

	stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done, "discovery service on %s", l.Addr())
		})
	}
	t.Cleanup(stop)

	return "http://" + l.Addr().String() + "/", stop
}

// membersGone records the members env stops listing, from now until the test ends.
func membersGone(t *testing.T, env *ctest.Env) func() []resource.ID {
	t.Helper()

	ch := make(chan state.Event)
	require.NoError(t, env.State.WatchKind(env.Ctx, resource.NewMetadata(cluster.NamespaceName, cluster.MemberType, "", resource.VersionUndefined), ch))

	var (
		mu   sync.Mutex
		gone []resource.ID
	)

	go func() {
		for {
			select {
			case <-env.Ctx.Done():
				return
			case ev := <-ch:
				if ev.Type == state.Destroyed {
					mu.Lock()
					gone = append(gone, ev.Resource.Metadata().ID())
					mu.Unlock()
				}
			}
		}
	}()

	return func() []resource.ID {
		mu.Lock()
		defer mu.Unlock()

		return slices.Clone(gone)
	}
}

// TestMembersSurviveServiceRestart: the discovery service restarted on its address from its
// snapshot keeps the cluster: nodes running across the restart never stop listing each other
// and still exchange updates after it; and what it lists right after a restart comes from the
// snapshot, not from the nodes sending again (a node started after it, the others dead, lists
// them all).
func TestMembersSurviveServiceRestart(t *testing.T) {
	snapshot := filepath.Join(t.TempDir(), "snapshot")
	endpoint, stop := serveDiscovery(t, "127.0.0.1:0", snapshot)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)

	addr := u.Host

	start := func(hostname string, host int) *ctest.Env {
		env := startNode(t)
		env.Create(append(node(hostname, testAddr(host)), ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint)))...)

		return env
	}

	a, b := start("ra", 31), start("rb", 32)
	ctest.AssertIDs[*cluster.Member](a, "ra", "rb")
	ctest.AssertIDs[*cluster.Member](b, "ra", "rb")

	goneA, goneB := membersGone(t, a), membersGone(t, b)

	stop()

	data, err := os.ReadFile(snapshot)
	require.NoError(t, err, "the stopped service's last snapshot")
	assert.Contains(t, string(data), localID(a))
	assert.Contains(t, string(data), localID(b))

	_, stop = serveDiscovery(t, addr, snapshot)

	// A node joining after the restart is seen by both: they are back on the new service.
	c := start("rc", 33)
	ctest.AssertIDs[*cluster.Member](c, "ra", "rb", "rc")
	ctest.AssertIDs[*cluster.Member](a, "ra", "rb", "rc")
	ctest.AssertIDs[*cluster.Member](b, "ra", "rb", "rc")

	// Neither ever stopped listing the other, not even while the service was down.
	assert.Empty(t, goneA(), "node ra stopped listing these members")
	assert.Empty(t, goneB(), "node rb stopped listing these members")

	// Every node dies (none withdraws), then the service restarts: only its snapshot can tell
	// a node started now about them.
	a.Stop()
	b.Stop()
	c.Stop()
	stop()

	serveDiscovery(t, addr, snapshot)

	d := start("rd", 34)
	ctest.AssertIDs[*cluster.Member](d, "ra", "rb", "rc", "rd")
}

// TestLeavingNodeExpires: a node that dies without withdrawing (its runtime stopped, no
// delete sent) stays listed by the others until what it sent expires, then goes.
func TestLeavingNodeExpires(t *testing.T) {
	endpoint := testenv.StartDiscovery(t)
	cfg := ctest.MachineConfig(t, machine.TypeWorker, discovery(true, true, endpoint))

	stay := startNode(t)
	stay.Create(append(node("stay", testAddr(41)), cfg)...)

	// The leaving node's affiliate lives 4 s past its last refresh (the client refreshes at
	// half of it), rather than upstream's 30 minutes.
	const ttl = 4 * time.Second // long enough that a stalled refresh (a loaded machine) cannot fake the margin below

	leave := startNodeWith(t, &clusterctrl.DiscoveryServiceController{TTL: ttl})
	leave.Create(append(node("leave", testAddr(42)), cfg)...)

	ctest.AssertIDs[*cluster.Member](stay, "leave", "stay")
	ctest.AssertIDs[*cluster.Member](leave, "leave", "stay")

	leave.Stop()

	killed := time.Now()

	// Its connection is gone but its affiliate is not: still listed.
	assert.Contains(t, rtestutils.ResourceIDs[*cluster.Member](stay.Ctx, t, stay.State), "leave")

	ctest.AssertNoResource[*cluster.Member](stay, "leave")

	// Its last refresh was at most ttl/2 before it died, so it expires at least ttl/2 after
	// that; a removal on disconnect would come within milliseconds.
	elapsed := time.Since(killed)
	t.Logf("the dead node was listed %v after it stopped", elapsed)
	assert.Greater(t, elapsed, ttl/4, "the dead node went before its TTL could expire")
	ctest.AssertIDs[*cluster.Member](stay, "stay")
}
