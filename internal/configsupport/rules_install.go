package configsupport

// How the install disk is chosen and prepared.
var installRules = []Rule{
	{
		Path: "machine.install.diskSelector", Refused: "choosing the install disk by a selector is not implemented",
		Fix: "name the disk in machine.install.disk (talosctl get disks lists them)",
	}, {
		Path: "machine.install.wipe", Refused: "wiping the whole install disk before the install is not implemented",
		Fix: "remove it (or set it to false): the installer writes a fresh partition table over the disk",
	}}
