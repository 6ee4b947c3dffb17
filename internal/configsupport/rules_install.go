package configsupport

// How the install disk is chosen and prepared. Container and process nodes never install (as
// upstream's container mode ignores machine.install), so, as machine.install.disk, these are
// honoured without node limits.
var installRules = []Rule{
	{Path: "machine.install.diskSelector", Test: "internal/e2e/metal.TestInstallDiskSelectorWipe"},
	{Path: "machine.install.wipe", Test: "internal/e2e/metal.TestInstallDiskSelectorWipe"},
}
