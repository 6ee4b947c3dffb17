package configsupport

// The v1alpha1 document's top level and the machine settings outside networking, Kubernetes
// and storage.
var machineRules = []Rule{
	{Path: "version", NoEffect: "names the document's schema: machinery refuses any other than v1alpha1"},
	{Path: "debug", Test: "internal/e2e.TestClusterCreateWithDebugAndEndpoint"},
	{Path: "persist", NoEffect: "deprecated upstream: the config is always kept on the node"},

	{Path: "machine.type", Test: "internal/e2e/container.TestKubernetesNodesReady"},
	{Path: "machine.token", Test: "internal/machined/controllers/secrets.TestAPIFromTrustd"},
	{Path: "machine.ca", Test: "internal/machined/controllers/secrets.TestAPILocal"},
	{Path: "machine.acceptedCAs", Test: "internal/machined/controllers/secrets.TestAPILocal"},
	{Path: "machine.certSANs", Test: "internal/machined/controllers/secrets.TestAPICertSANs"},

	{Path: "machine.install.disk", Test: "internal/e2e/metal.TestClusterCreateQEMU"},
	{Path: "machine.install.extraKernelArgs", Test: "internal/install.TestCmdline"},
	{Path: "machine.install.image", NoEffect: "a metal node installs the system it booted; an upgrade names its image on the command line"},
	{Path: "machine.install.bootloader", NoEffect: "deprecated upstream: the bootloader is always installed"},
	{Path: "machine.install.legacyBIOSSupport", NoEffect: "an installed disk always carries GRUB for BIOS and UEFI boot"},

	{
		Path: "machine.install.extensions", Refused: "system extensions are not supported yet",
		Fix: "remove it",
	},
	{
		Path: "machine.disks", Refused: "machine.disks partitions are not implemented",
		Fix: "use UserVolumeConfig documents for extra volumes",
	},

	{Path: "machine.time.disabled", Test: "internal/machined/controllers/timesync.TestSyncDisabled"},
	{Path: "machine.time.servers", Test: "internal/machined/controllers/timesync.TestSyncFromTheFirstServerThatAnswers"},
	{Path: "machine.time.bootTimeout", Test: "internal/machined/controllers/timesync.TestBootTimeoutUnlocksTheBoot"},

	{Path: "machine.files", Test: "internal/e2e/container.TestMachineEnvAndFilesAfterReboot"},
	{Path: "machine.env", Test: "internal/e2e/container.TestMachineEnvAndFilesAfterReboot"},
	{Path: "machine.nodeLabels", Test: "internal/e2e/container.TestNodeLabelsTaintsAnnotationsFollowConfig"},
	{Path: "machine.nodeAnnotations", Test: "internal/e2e/container.TestNodeLabelsTaintsAnnotationsFollowConfig"},
	{Path: "machine.nodeTaints", Test: "internal/e2e/container.TestNodeLabelsTaintsAnnotationsFollowConfig"},

	{Path: "cluster.etcd.advertisedSubnets", Test: "internal/etcd.TestEtcdAdvertisedAndListenSubnets"},
	{Path: "cluster.etcd.listenSubnets", Test: "internal/etcd.TestEtcdAdvertisedAndListenSubnets"},

	{Path: "machine.sysctls", Test: "internal/machined/controllers/runtime.TestKernelParamController"},

	{Path: "machine.registries.mirrors", Test: "internal/e2e/container.TestRegistryMirror"},
	{Path: "machine.registries.config.*.tls", Test: "internal/machined/controllers/cri.TestRegistryHosts"},
	{Path: "machine.registries.config.*.auth.username", Test: "internal/e2e/container.TestPodPullsThroughMirrorWithAuth"},
	{Path: "machine.registries.config.*.auth.password", Test: "internal/e2e/container.TestPodPullsThroughMirrorWithAuth"},
	// Passed to CRI as the others (a pull with them is not tried here: no token server).
	{Path: "machine.registries.config.*.auth.auth", Test: "internal/machined/controllers/cri.TestRegistryAuthAndMirrorTLS"},
	{Path: "machine.registries.config.*.auth.identityToken", Test: "internal/machined/controllers/cri.TestRegistryAuthAndMirrorTLS"},

	{Path: "machine.systemDiskEncryption", Test: "internal/e2e/metal.TestClusterCreateQEMUEncrypted"},
	{Path: "machine.systemDiskEncryption.state.keys[].tpm", Test: "internal/e2e/metal.TestClusterCreateQEMUFromUKI"},
	{Path: "machine.systemDiskEncryption.ephemeral.keys[].tpm", Test: "internal/e2e/metal.TestClusterCreateQEMUFromUKI"},

	{Path: "machine.features.diskQuotaSupport", Test: "internal/machined/controllers/k8s.TestKubelet"},
	{Path: "machine.features.hostDNS", Test: "internal/e2e/container.TestHostDNS"},
	{Path: "machine.features.hostDNS.resolveMemberNames", Test: "internal/machined/controllers/network.TestResolverMemberNames"},
	{Path: "machine.features.imageCache", NoEffect: "the node always imports the image cache its node image carries; there is no separate cache volume to enable"},
	{Path: "machine.features.nodeAddressSortAlgorithm", Test: "internal/machined/controllers/network.TestNodeAddressSortAlgorithm"},

	{Path: "machine.logging", Test: "internal/e2e.TestClusterCreateWithDebugAndEndpoint"},

	// Run by the metal node's udevd (internal/udev) on every device when they change and on
	// each uevent after; Check refuses the keys it does not know, naming the rule.
	{
		Path: "machine.udev.rules", Test: udevEthernetTest, On: []Node{Process, Container},
		Refused: "a process or container node runs no udevd: its devices are the host's",
		Fix:     "remove them, and add the rules to the host's udev, or run a metal node",
	},

	// Merged into containerd's default spec as CRI's runc base_runtime_spec at containerd's start.
	{
		Path: "machine.baseRuntimeSpecOverrides", Test: "internal/machined/controllers/cri.TestBaseRuntimeSpecOverrides", On: []Node{Process},
		Refused: "a process node runs no containerd: its pods' runtime spec is not the node's to set",
		Fix:     "remove it, or run the node as a container or on its own kernel",
	},
}
