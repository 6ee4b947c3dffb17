package runtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
	"github.com/talos-go/talos/internal/metal"
)

// modulesDir is a kernel's modules folder with one module built in (nothing for the test to
// load into the host's kernel) and none other.
func modulesDir(t *testing.T) *metal.Modules {
	t.Helper()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/drivers/net/dummy.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	mods, err := metal.OpenModules(dir)
	if err != nil {
		t.Fatal(err)
	}

	return mods
}

// A module the node's modules lack, or one with no name, is an error naming its field; the
// others still load.
func TestLoadKernelModules(t *testing.T) {
	mods := modulesDir(t)
	modules := []config.KernelModule{
		&v1alpha1.KernelModuleConfig{ModuleName: "no_such_module"},
		&v1alpha1.KernelModuleConfig{ModuleName: "dummy", ModuleParameters: []string{"numdummies=2"}},
		&v1alpha1.KernelModuleConfig{},
	}

	errs := runtimectrl.LoadKernelModules(modules, mods.LoadWith)
	if len(errs) != 2 {
		t.Fatalf("want 2 errors, got %v", errs)
	}

	for i, want := range []string{"machine.kernel.modules[0].name: module no_such_module: no such module", "machine.kernel.modules[2].name: empty"} {
		if !strings.HasPrefix(errs[i].Error(), want) {
			t.Errorf("error %d: %v, want it to start %q", i, errs[i], want)
		}
	}
}

// The config's modules are published as upstream's KernelModuleSpecs, by name, with their
// parameters; one dropped from the config goes.
func TestKernelModuleController(t *testing.T) {
	mods := modulesDir(t)
	e := ctest.Start(t, &runtimectrl.KernelModuleController{Load: mods.LoadWith})

	e.Create(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineKernel = &v1alpha1.KernelConfig{KernelModules: []*v1alpha1.KernelModuleConfig{
			{ModuleName: "dummy", ModuleParameters: []string{"numdummies=2"}}, {ModuleName: "no_such_module"},
		}}
	}))

	ctest.AssertResource(e, "dummy", func(r *runtimeres.KernelModuleSpec, a *assert.Assertions) {
		a.Equal(runtimeres.KernelModuleSpecSpec{Name: "dummy", Parameters: []string{"numdummies=2"}}, *r.TypedSpec())
	})
	ctest.AssertIDs[*runtimeres.KernelModuleSpec](e, "dummy", "no_such_module")

	e.Put(ctest.MachineConfig(t, machine.TypeWorker))
	ctest.AssertIDs[*runtimeres.KernelModuleSpec](e)
}
