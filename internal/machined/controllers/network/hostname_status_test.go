package network_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// kernel stands for sethostname: it records what was applied, and fails while told to.
type kernel struct {
	mu      sync.Mutex
	fail    bool
	refused chan struct{} // closed at the first refusal
	applied string
}

func (k *kernel) apply(hostname, domain string) error {
	k.mu.Lock()
	defer k.mu.Unlock()

	if k.fail {
		select {
		case <-k.refused:
		default:
			close(k.refused)
		}

		return errors.New("sethostname: operation not permitted")
	}

	k.applied = hostname + "." + domain

	return nil
}

func (k *kernel) setFail(fail bool) {
	k.mu.Lock()
	defer k.mu.Unlock()

	k.fail = fail
}

func (k *kernel) appliedName() string {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.applied
}

func hostnameSpec(hostname, domain string) *network.HostnameSpec {
	res := network.NewHostnameSpec(network.NamespaceName, network.HostnameID)
	res.TypedSpec().Hostname, res.TypedSpec().Domainname = hostname, domain

	return res
}

func assertStatus(env *ctest.Env, hostname, domain string) {
	env.T.Helper()

	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameStatus, a *assert.Assertions) {
		a.Equal(hostname, r.TypedSpec().Hostname)
		a.Equal(domain, r.TypedSpec().Domainname)
	})
}

func TestHostnameStatusRecords(t *testing.T) {
	env := ctest.Start(t, networkctrl.NewHostnameStatusController(nil))

	spec := hostnameSpec("node1", "example.org")
	env.Create(spec)
	assertStatus(env, "node1", "example.org")

	ctest.Update(env, spec, func(r *network.HostnameSpec) error {
		r.TypedSpec().Hostname, r.TypedSpec().Domainname = "node2", ""

		return nil
	})
	assertStatus(env, "node2", "")

	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameStatus, a *assert.Assertions) {
		a.Equal("node2", r.TypedSpec().FQDN())
	})

	env.Destroy(spec)
	ctest.AssertNoResource[*network.HostnameStatus](env, network.HostnameID)
}

func TestHostnameStatusFollowsApply(t *testing.T) {
	k := &kernel{fail: true, refused: make(chan struct{})}
	env := ctest.Start(t, networkctrl.NewHostnameStatusController(k.apply))

	env.Create(hostnameSpec("node1", "example.org"))

	// While the kernel refuses, no status: it reports the hostname in effect, not the wish.
	select {
	case <-k.refused:
	case <-env.Ctx.Done():
		t.Fatal("the hostname was never applied")
	}

	_, err := safe.StateGetByID[*network.HostnameStatus](env.Ctx, env.State, network.HostnameID)
	require.True(t, state.IsNotFoundError(err), "status written although applying failed: %v", err)

	// The controller is retried, and the status follows once the kernel takes the name.
	k.setFail(false)

	assertStatus(env, "node1", "example.org")

	assert.Equal(t, "node1.example.org", k.appliedName())
}
