package configsupport

// The volume documents.
var storageRules = []Rule{
	{Path: "UserVolumeConfig", Test: "internal/e2e/metal.TestClusterCreateQEMUEncrypted"},
	{Path: "UserVolumeConfig.encryption.keys[].tpm", Test: "internal/e2e/metal.TestClusterCreateQEMUFromUKI"},

	{Path: "VolumeConfig.name", Test: "internal/encryption.TestFromConfig"},
	{Path: "VolumeConfig.encryption", Test: "internal/encryption.TestFromConfig"},
	{
		Path: "VolumeConfig.provisioning", Refused: "the system volumes' sizes and disks are fixed by the installer",
		Fix: "remove provisioning from the VolumeConfig (encryption is honoured)",
	},

	{
		Path: "RawVolumeConfig", Refused: "raw volumes are not implemented",
		Fix: "remove the document, or use a UserVolumeConfig (an xfs volume)",
	},
	{
		Path: "ExistingVolumeConfig", Refused: "mounting existing volumes is not implemented",
		Fix: "remove the document, or use a UserVolumeConfig",
	},
	{
		Path: "SwapVolumeConfig", Refused: "swap volumes are not implemented",
		Fix: "remove the document",
	},
	{
		Path: "ZswapConfig", Refused: "zswap is not configured by this node",
		Fix: "remove the document",
	},
}
