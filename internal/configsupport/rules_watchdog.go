package configsupport

// The hardware watchdog.
var watchdogRules = []Rule{
	{
		// The device and the machine it resets are the node's own kernel's: a process or
		// container node would arm the host's watchdog, and a machined stopped by its
		// provisioner would reset the host.
		Path: "WatchdogTimerConfig", Test: "internal/e2e/metal.TestWatchdogTimer", On: []Node{Process, Container},
		Refused: "a watchdog device belongs to the machine's own kernel, and this node runs on the host's",
		Fix:     "remove the document, or run the node on metal",
	}}
