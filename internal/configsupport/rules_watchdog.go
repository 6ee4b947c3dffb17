package configsupport

// The hardware watchdog.
var watchdogRules = []Rule{
	{
		Path: "WatchdogTimerConfig", Refused: "the hardware watchdog is not driven by this node yet",
		Fix: "remove the document",
	}}
