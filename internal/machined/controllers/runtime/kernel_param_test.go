package runtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
)

// A sysctl tree standing for /proc/sys: the controller sets the KSPP defaults, then the
// config's machine.sysctls over them, and reports what it read back and what was there before.
func TestKernelParamController(t *testing.T) {
	procSys := t.TempDir()

	for key, value := range map[string]string{"kernel.kptr_restrict": "0", "kernel.panic": "0", "net.ipv4.ip_forward": "0"} {
		p := filepath.Join(procSys, strings.ReplaceAll(key, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	e := ctest.Start(t, &runtimectrl.KernelParamController{ProcSys: procSys})

	// Before a config: the defaults. A parameter this kernel lacks is unsupported.
	ctest.AssertResource(e, "kernel.kptr_restrict", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "1", Default: "0"}, *r.TypedSpec())
	})
	ctest.AssertResource(e, "kernel.dmesg_restrict", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.True(r.TypedSpec().Unsupported)
	})

	e.Create(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineSysctls = map[string]string{"net.ipv4.ip_forward": "1", "kernel.panic": "30"}
	}))

	ctest.AssertResource(e, "net.ipv4.ip_forward", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "1", Default: "0"}, *r.TypedSpec())
	})
	// The config wins over a default; Default stays the value before the node set any.
	ctest.AssertResource(e, "kernel.panic", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "30", Default: "0"}, *r.TypedSpec())
	})

	if b, _ := os.ReadFile(filepath.Join(procSys, "kernel", "panic")); string(b) != "30" {
		t.Fatalf("kernel/panic holds %q", b)
	}
}
