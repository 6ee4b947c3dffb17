package ctest_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// TestEnv checks the harness on its own state, with no controller: Put creates then replaces,
// Update changes in place, Destroy removes, and the assertions see each step.
func TestEnv(t *testing.T) {
	env := ctest.Start(t)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane))

	ctest.AssertResource(env, config.ActiveID, func(r *config.MachineConfig, a *assert.Assertions) {
		a.Equal(machine.TypeControlPlane, r.Config().Machine().Type())
		a.EqualValues(2, r.Metadata().Version().Value())
	})

	status := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	env.Create(status)
	ctest.Update(env, status, func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname = "node1"

		return nil
	})

	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameStatus, a *assert.Assertions) {
		a.Equal("node1", r.TypedSpec().Hostname)
	})
	ctest.AssertIDs[*network.HostnameStatus](env, network.HostnameID)

	env.Destroy(status)
	ctest.AssertNoResource[*network.HostnameStatus](env, network.HostnameID)
	ctest.AssertIDs[*network.HostnameStatus](env)
}
