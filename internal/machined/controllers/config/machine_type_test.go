package config_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/stretchr/testify/assert"

	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

func TestMachineType(t *testing.T) {
	env := ctest.Start(t, configctrl.NewMachineTypeController())

	assertType := func(want machine.Type) {
		t.Helper()

		ctest.AssertResource(env, config.MachineTypeID, func(r *config.MachineType, a *assert.Assertions) {
			a.Equal(want, r.MachineType())
		})
	}

	// A config without a machine section is skipped; the first with one sets the type, and a
	// changed config changes it.
	env.Put(ctest.EmptyConfig(t))
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane))
	assertType(machine.TypeControlPlane)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))
	assertType(machine.TypeWorker)

	env.Put(ctest.MachineConfig(t, machine.TypeInit))
	assertType(machine.TypeInit)
}
