package configsupport

const (
	volumeGrow    = "this node sizes user, swap and raw volumes once, when it makes them (the free space up to maxSize), and does not grow them later on a bigger disk"
	volumeGrowFix = "remove grow (maxSize alone bounds the volume; without it the volume takes the disk's free space)"
)

// The volume documents.
var storageRules = []Rule{
	{
		Path: "UserVolumeConfig", Test: "internal/e2e/metal.TestClusterCreateQEMUEncrypted",
		Refused: "user volumes are partitions of the node's own disks", On: []Node{Process, Container},
		Fix: "remove the document (user volumes are for nodes on their own disks: talosctl cluster create --provisioner qemu --user-volumes)",
	},
	// grow: true on these would change nothing: a volume takes the free space up to maxSize when
	// it is made, grow or not, and is not grown later (EPHEMERAL is: VolumeConfig's grow).
	{Path: "UserVolumeConfig.provisioning.grow", Refused: volumeGrow, Fix: volumeGrowFix},
	{Path: "SwapVolumeConfig.provisioning.grow", Refused: volumeGrow, Fix: volumeGrowFix},
	{Path: "RawVolumeConfig.provisioning.grow", Refused: volumeGrow, Fix: volumeGrowFix},
	{Path: "UserVolumeConfig.encryption.keys[].tpm", Test: "internal/e2e/metal.TestClusterCreateQEMUFromUKI"},

	{Path: "VolumeConfig.name", Test: "internal/encryption.TestFromConfig"},
	{Path: "VolumeConfig.encryption", Test: "internal/encryption.TestFromConfig"},
	// EPHEMERAL's size is set by the installer (internal/install.EphemeralSize), an EPHEMERAL
	// below 1 GiB refused by value (internal/install.TestEphemeralSize); grow: true grows it at
	// boot into a disk that grew (metal.growEphemeral).
	{
		Path: "VolumeConfig.provisioning", Test: "internal/e2e/metal.TestClusterCreateQEMUVolumes",
		Refused: "EPHEMERAL is a folder of the node's state folder, with no partition to size", On: []Node{Process, Container},
		Fix: "remove provisioning from the VolumeConfig (encryption is honoured)",
	},
	{
		Path: "VolumeConfig.provisioning.grow", Test: "internal/e2e/metal.TestEphemeralGrowsWithItsDisk",
		Refused: "EPHEMERAL is a folder of the node's state folder, with no partition to size", On: []Node{Process, Container},
		Fix: "remove provisioning from the VolumeConfig (encryption is honoured)",
	},
	{
		Path: "VolumeConfig.provisioning.diskSelector", Refused: "EPHEMERAL is made on the install disk, next to STATE",
		Fix: "remove the diskSelector; choose the disk with machine.install.disk or machine.install.diskSelector",
	},

	// Swap and raw volumes are partitions made as user volumes are (internal/uservolume),
	// encryption included: the e2e test encrypts both (nodeID keys; the other key kinds are the
	// user volumes' code).
	{
		Path: "SwapVolumeConfig", Test: "internal/e2e/metal.TestClusterCreateQEMUVolumes",
		Refused: "swap volumes are partitions of the node's own disks, and swap is the host kernel's", On: []Node{Process, Container},
		Fix: "remove the document (swap is for nodes on their own kernel and disks)",
	},
	{
		Path: "RawVolumeConfig", Test: "internal/e2e/metal.TestClusterCreateQEMUVolumes",
		Refused: "raw volumes are partitions of the node's own disks", On: []Node{Process, Container},
		Fix: "remove the document (raw volumes are for nodes on their own disks)",
	},
	{
		Path: "ExistingVolumeConfig", Test: "internal/e2e/metal.TestClusterCreateQEMUVolumes",
		Refused: "existing volumes are found on the node's own disks", On: []Node{Process, Container},
		Fix: "remove the document (existing volumes are for nodes on their own disks)",
	},
	{
		// Upstream writes /sys/module/zswap/parameters/{enabled,max_pool_percent,shrinker_enabled}.
		Path: "ZswapConfig", Refused: "no zswap: the metal node's kernel (Debian's cloud kernel 6.1) is built without it " +
			"(CONFIG_ZSWAP is not set, no /sys/module/zswap), and process and container nodes share the host's kernel",
		Fix: "remove the document",
	},
}
