package configsupport

// The kernel settings of the machine: sysfs values and kernel modules.
var kernelRules = []Rule{
	{
		Path: "machine.sysfs", Refused: "writing sysfs values is not implemented",
		Fix: "remove it",
	}, {
		Path: "machine.kernel.modules", Refused: "loading kernel modules from the config is not implemented",
		Fix: "remove them",
	}}
