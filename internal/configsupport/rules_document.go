package configsupport

// The documents outside networking and storage.
var documentRules = []Rule{
	{Path: "KmsgLogConfig", Test: "internal/e2e/container.TestKmsgLogConfigSendsKernelLog"},
	{Path: "EventSinkConfig", Test: "internal/e2e/container.TestEventSinkConfigSendsEvents"},
	{Path: "TrustedRootsConfig", Test: "internal/e2e/container.TestTrustedRootsConfigTrustsPrivateCA"},
	{
		Path: "ExtensionServiceConfig", Refused: "system extensions (and so their services) are not supported yet",
		Fix: "remove the document",
	},
	{
		Path: "SideroLinkConfig", Refused: "SideroLink is not implemented",
		Fix: "remove the document",
	},
	{
		Path: "PCIDriverRebindConfig", Refused: "rebinding PCI drivers is not implemented",
		Fix: "remove the document",
	},
}
