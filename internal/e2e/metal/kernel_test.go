package metal

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// machine.kernel.modules and machine.sysfs on the node's own kernel, in one boot: machined loads
// the dummy module (carried by the initramfs) with numdummies=2, so the kernel makes dummy0 and
// dummy1, and writes transparent_hugepage's mode under /sys (Debian's cloud kernel has THP,
// "always" by default). A module the image lacks and a sysfs key the kernel lacks are errors on
// the console naming their fields. A config change adds a module and a value, taking effect
// without a reboot.
func TestKernelModulesAndSysfsFromConfig(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli, `machine:
  kernel:
    modules:
      - name: dummy
        parameters: [numdummies=2]
      - name: no_such_module
  sysfs:
    kernel.mm.transparent_hugepage.enabled: never
    kernel.mm.no_such_setting: "1"
`)

	m := bootWith(t, qemuOptions{open: true}, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)

	cli.TalosConfig = src.talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)
	node := []string{"-e", ep, "-n", "10.0.2.15"}

	// waitFor waits until `talosctl args` prints something matching want.
	waitFor := func(what string, timeout time.Duration, want string, args ...string) {
		t.Helper()

		testenv.WaitFor(t, what, timeout, func() error {
			if err := m.running(); err != nil {
				return err
			}

			out, errOut, code := cli.Run(t, append(node, args...)...)
			if code != 0 {
				return fmt.Errorf("%s", errOut)
			}

			if !regexp.MustCompile(want).MatchString(out) {
				return fmt.Errorf("no %s in:\n%s", want, out)
			}

			return nil
		})
	}

	// numdummies=2: the kernel made both links when machined loaded the module.
	waitFor("dummy1 from numdummies=2", 4*time.Minute, `(?m)\sdummy1\s`, "get", "links")
	waitFor("dummy0", 30*time.Second, `(?m)\sdummy0\s`, "get", "links")
	waitFor("the module's spec", 30*time.Second, `(?s)id: dummy\n.*numdummies=2`, "get", "kernelmodulespecs", "dummy", "-o", "yaml")

	thp := cli.Must(t, append(node, "read", "/sys/kernel/mm/transparent_hugepage/enabled")...)
	if !strings.Contains(thp, "[never]") {
		t.Errorf("the guest's transparent_hugepage/enabled: %q, want [never]", thp)
	}

	t.Logf("links: %s; transparent_hugepage/enabled: %s", regexp.MustCompile(`dummy\d`).FindAllString(cli.Must(t, append(node, "get", "links")...), -1), strings.TrimSpace(thp))

	waitFor("the sysfs value's status", 30*time.Second, `(?s)current: always madvise \[never\]\n.*default: '?\[always\] madvise never`,
		"get", "kernelparamstatus", "sys.kernel.mm.transparent_hugepage.enabled", "-o", "yaml")

	console := m.consoleText()
	for _, want := range []string{"machine.kernel.modules[1].name: module no_such_module: no such module", "machine.sysfs.kernel.mm.no_such_setting: this kernel has no /sys/kernel/mm/no_such_setting"} {
		if !strings.Contains(console, want) {
			t.Errorf("the console does not say %q", want)
		}
	}

	// A config change: a module added is loaded with its parameters (bonding makes bond0 with
	// max_bonds=1), a sysfs value added is written; no reboot.
	cli.Must(t, append(node, "patch", "mc", "--mode=no-reboot", "-p",
		`[{"op":"add","path":"/machine/kernel/modules/-","value":{"name":"bonding","parameters":["max_bonds=1"]}},`+
			`{"op":"add","path":"/machine/sysfs/kernel.mm.transparent_hugepage.defrag","value":"never"}]`)...)

	waitFor("bond0 from the added module", 30*time.Second, `(?m)\sbond0\s`, "get", "links")
	waitFor("the added sysfs value", 30*time.Second, `\[never\]`, "read", "/sys/kernel/mm/transparent_hugepage/defrag")
}
