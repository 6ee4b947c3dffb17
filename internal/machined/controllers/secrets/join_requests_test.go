package secrets_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/trustd"
)

// TestJoinRequests: on a control plane, the requests trustd recorded are published as
// JoinRequests, an admin's JoinDecision reaches the folder trustd reads, and a dropped request
// goes away.
func TestJoinRequests(t *testing.T) {
	joins := &trustd.Joins{Dir: t.TempDir()}
	env := startSigner(t, &secretsctrl.JoinRequestsController{Dir: joins.Dir, Poll: 50 * time.Millisecond})
	env.Create(append(node("cp1", "10.0.0.1"), ctest.MachineConfig(t, machine.TypeControlPlane))...)

	const id = "0123456789abcdef"

	seen := time.Now().Add(-time.Minute).Truncate(time.Second)
	_, _, err := joins.Seen(id, "10.0.0.7", []string{"w7", "10.0.0.7"}, seen)
	require.NoError(t, err)

	ctest.AssertResource(env, id, func(r *resources.JoinRequest, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal("pending", spec.State)
		a.Equal([]string{"10.0.0.7"}, spec.Addresses)
		a.Equal([]string{"w7", "10.0.0.7"}, spec.Names)
		a.True(spec.LastSeen.Equal(seen), "last seen %v, want %v", spec.LastSeen, seen)
	})

	decision := resources.NewJoinDecision(id)
	decision.TypedSpec().State = "approved"
	env.Create(decision)

	ctest.AssertResource(env, id, func(r *resources.JoinRequest, a *assert.Assertions) {
		a.Equal("approved", r.TypedSpec().State)
	})

	state, err := joins.Decision(id)
	require.NoError(t, err)
	assert.Equal(t, trustd.JoinApproved, state, "trustd reads the decision")

	// A decision changes: deny.
	ctest.Update(env, decision, func(d *resources.JoinDecision) error { d.TypedSpec().State = "denied"; return nil })

	ctest.AssertResource(env, id, func(r *resources.JoinRequest, a *assert.Assertions) {
		a.Equal("denied", r.TypedSpec().State)
	})

	// A stale pending request, pruned by trustd, disappears.
	const stale = "fedcba9876543210"

	_, _, err = joins.Seen(stale, "10.0.0.8", nil, time.Now().Add(-2*trustd.JoinPendingTTL))
	require.NoError(t, err)
	ctest.AssertResource(env, stale, func(*resources.JoinRequest, *assert.Assertions) {})

	require.NoError(t, joins.Prune(time.Now()))
	ctest.AssertNoResource[*resources.JoinRequest](env, stale)
}
