package runtime_test

import (
	"fmt"
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

// A sysctl tree standing for /proc/sys and a sysfs one for /sys: the controller sets the KSPP
// defaults, then the config's machine.sysctls over them, and its machine.sysfs values, and
// reports what it read back and what was there before, named as upstream's statuses.
func TestKernelParamController(t *testing.T) {
	procSys, sysfs := t.TempDir(), t.TempDir()

	writeTree(t, procSys, map[string]string{"kernel/kptr_restrict": "0", "kernel/panic": "0", "net/ipv4/ip_forward": "0"})
	writeTree(t, sysfs, map[string]string{"kernel/mm/transparent_hugepage/enabled": "always", "class/net/eth0.100/mtu": "1500"})

	e := ctest.Start(t, &runtimectrl.KernelParamController{ProcSys: procSys, Sysfs: sysfs})

	// Before a config: the defaults. A parameter this kernel lacks is unsupported.
	ctest.AssertResource(e, "proc.sys.kernel.kptr_restrict", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "1", Default: "0"}, *r.TypedSpec())
	})
	ctest.AssertResource(e, "proc.sys.kernel.dmesg_restrict", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.True(r.TypedSpec().Unsupported)
	})

	e.Create(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineSysctls = map[string]string{"net.ipv4.ip_forward": "1", "kernel.panic": "30"}
		c.MachineConfig.MachineSysfs = map[string]string{
			"kernel.mm.transparent_hugepage.enabled": "never",
			"class/net/eth0.100/mtu":                 "1400", // a name with a dot: the slash form
			"kernel.mm.no_such_setting":              "1",
			"kernel..mm":                             "1",
		}
	}))

	// machine.sysfs: written under /sys, reported as sys.<key>.
	ctest.AssertResource(e, "sys.kernel.mm.transparent_hugepage.enabled", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "never", Default: "always"}, *r.TypedSpec())
	})
	ctest.AssertResource(e, "sys.class/net/eth0.100/mtu", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal("1400", r.TypedSpec().Current)
	})
	// A key this kernel has no file for is unsupported; one that is no path gets no status.
	ctest.AssertResource(e, "sys.kernel.mm.no_such_setting", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.True(r.TypedSpec().Unsupported)
	})
	ctest.AssertNoResource[*runtimeres.KernelParamStatus](e, "sys.kernel..mm")

	ctest.AssertResource(e, "proc.sys.net.ipv4.ip_forward", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "1", Default: "0"}, *r.TypedSpec())
	})
	// The config wins over a default; Default stays the value before the node set any.
	ctest.AssertResource(e, "proc.sys.kernel.panic", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal(runtimeres.KernelParamStatusSpec{Current: "30", Default: "0"}, *r.TypedSpec())
	})

	if b, _ := os.ReadFile(filepath.Join(procSys, "kernel", "panic")); string(b) != "30" {
		t.Fatalf("kernel/panic holds %q", b)
	}

	if b, _ := os.ReadFile(filepath.Join(sysfs, "kernel", "mm", "transparent_hugepage", "enabled")); string(b) != "never" {
		t.Fatalf("kernel/mm/transparent_hugepage/enabled holds %q", b)
	}

	// A sysfs key dropped from the config loses its status (the kernel keeps the value, as
	// upstream's: there is no default to go back to).
	e.Put(ctest.MachineConfig(t, machine.TypeWorker))
	ctest.AssertNoResource[*runtimeres.KernelParamStatus](e, "sys.kernel.mm.transparent_hugepage.enabled")
	ctest.AssertResource(e, "proc.sys.kernel.panic", func(r *runtimeres.KernelParamStatus, a *assert.Assertions) {
		a.Equal("10", r.TypedSpec().Current) // back to the default
	})
}

// writeTree writes files (path under dir → content) as a kernel's parameter folder.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()

	for name, value := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The key → file mapping, as upstream's and sysctl(8)'s: dots are slashes unless the key has a
// slash; a key with an empty name, or one that would leave the folder, is refused naming it.
func TestParamPath(t *testing.T) {
	for key, want := range map[string]string{
		"kernel.mm.transparent_hugepage.enabled": "/sys/kernel/mm/transparent_hugepage/enabled",
		"class/net/eth0.100/mtu":                 "/sys/class/net/eth0.100/mtu",
		"devices.system.cpu.cpu0.online":         "/sys/devices/system/cpu/cpu0/online",
	} {
		if got, err := runtimectrl.ParamPath("/sys", key); err != nil || got != want {
			t.Errorf("ParamPath(%q) = %q, %v; want %q", key, got, err, want)
		}
	}

	for _, key := range []string{"", ".", "kernel..mm", ".kernel", "kernel.", "../etc/passwd", "kernel/../../etc", "/kernel/mm", "kernel//mm"} {
		_, err := runtimectrl.ParamPath("/sys", key)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("key %q", key)) {
			t.Errorf("ParamPath(%q): %v, want an error naming the key", key, err)
		}
	}
}
