package configsupport

// kernelTest proves both kernel settings on a node's own kernel: one metal boot loads the
// config's dummy module with numdummies=2 and writes its sysfs value.
const kernelTest = "internal/e2e/metal.TestKernelModulesAndSysfsFromConfig"

// The kernel settings of the machine: sysfs values and kernel modules. Both are the node's own
// kernel's: a process node shares the host's kernel and /sys, a container node runs on the
// host's kernel with its /sys read-only, so neither may change them.
var kernelRules = []Rule{
	{
		Path: "machine.sysfs", Test: kernelTest, On: []Node{Process, Container},
		Refused: "a process or container node shares the host's kernel and /sys: writing sysfs values would change the host",
		Fix:     "remove it, and set the value on the host, or run a metal node",
	}, {
		Path: "machine.kernel.modules", Test: kernelTest, On: []Node{Process, Container},
		Refused: "a process or container node runs on the host's kernel: it cannot load modules into it",
		Fix:     "remove them, and load the modules on the host (modprobe), or run a metal node",
	}}
