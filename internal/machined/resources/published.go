package resources

import (
	"slices"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/files"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubeaccess"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/perf"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/siderolink"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/talos-go/talos/internal/configsupport"
)

// A type is registered on a node only where the node fills it: a type this kind of node can
// never fill is not registered there, so `talosctl get <type>` answers NotFound at once instead
// of an empty list forever. Every machinery type is registered on every kind of node, or is on
// one of the two tables below with the reason (TestEveryMachineryTypeIsPublishedOrExplained).

// onlyOn are the registered types that some kinds of node cannot fill: the kinds that do, and
// why the others cannot.
var onlyOn = map[resource.Type]struct {
	on  []configsupport.Node
	why string
}{
	network.LinkSpecType:     {metal, specsWhy},
	network.AddressSpecType:  {metal, specsWhy},
	network.RouteSpecType:    {metal, specsWhy},
	network.OperatorSpecType: {metal, specsWhy},
	network.ResolverSpecType: {metal, specsWhy},

	network.NfTablesChainType:   {ownNetwork, sharedNetworkWhy},
	network.HostDNSConfigType:   {ownNetwork, sharedNetworkWhy},
	network.DNSUpstreamType:     {ownNetwork, sharedNetworkWhy},
	network.DNSResolveCacheType: {ownNetwork, sharedNetworkWhy},

	runtimeres.KernelCmdlineType:       {metal, kernelWhy + " (upstream publishes none in containers)"},
	runtimeres.KernelParamStatusType:   {metal, kernelWhy},
	runtimeres.KernelModuleSpecType:    {metal, kernelWhy},
	runtimeres.WatchdogTimerConfigType: {metal, kernelWhy + ": the hardware watchdog is the machine's"},
	runtimeres.WatchdogTimerStatusType: {metal, kernelWhy + ": the hardware watchdog is the machine's"},
	runtimeres.PlatformMetadataType:    {metal, "written from what the metal initramfs read from its platform; not yet on container and process nodes (upstream's container platform publishes platform: container)"},
	kubespan.ConfigType:                {metal, kubespanWhy},
	kubespan.IdentityType:              {metal, kubespanWhy},
	kubespan.PeerSpecType:              {metal, kubespanWhy},
	kubespan.PeerStatusType:            {metal, kubespanWhy},
	kubespan.EndpointType:              {metal, kubespanWhy},
	block.DeviceType:                   {metal, udevWhy},
	network.EthernetStatusType:         {metal, kernelWhy + ": ethtool settings are the machine's NICs'"},
	block.DiscoveredVolumeType:         {metal, udevWhy},
	block.SymlinkType:                  {metal, udevWhy},
	block.VolumeStatusType:             {metal, udevWhy + " (user volumes)"},
	k8s.KubePrismEndpointsType:         {ownNetwork, kubeletWhy},
	k8s.KubePrismConfigType:            {ownNetwork, kubeletWhy},
	k8s.KubePrismStatusesType:          {ownNetwork, kubeletWhy},
	k8s.StaticPodStatusType:            {ownNetwork, kubeletWhy},
	k8s.StaticPodServerStatusType:      {ownNetwork, kubeletWhy},
	k8s.ManifestStatusType:             {ownNetwork, kubeletWhy},
}

const (
	specsWhy         = "only a node on its own kernel sets its links, addresses, routes and resolvers from the config; container and process nodes report theirs (the *Status types)"
	sharedNetworkWhy = "a process node shares the host's network namespace: no firewall and no host DNS of its own"
	kernelWhy        = "only a metal node has a kernel of its own"
	kubespanWhy      = "KubeSpan's WireGuard link needs the node's own kernel"
	udevWhy          = "udevd (block devices, their probes and /dev/disk links) runs on metal only"
	kubeletWhy       = "a process node runs no kubelet and no API server"
)

var (
	metal      = []configsupport.Node{configsupport.Metal}
	ownNetwork = []configsupport.Node{configsupport.Container, configsupport.Metal}
)

// NotPublished are the machinery types no node registers, with the reason: what upstream does
// with them that ours does otherwise, or does not do yet.
var NotPublished = map[resource.Type]string{
	siderolink.ConfigType: sideroLinkWhy,
	siderolink.StatusType: sideroLinkWhy,
	siderolink.TunnelType: sideroLinkWhy,

	runtimeres.ExtensionServiceConfigType:       extensionsWhy,
	runtimeres.ExtensionServiceConfigStatusType: extensionsWhy,

	runtimeres.MaintenanceServiceConfigType:  maintenanceWhy,
	runtimeres.MaintenanceServiceRequestType: maintenanceWhy,
	secrets.MaintenanceRootType:              maintenanceWhy,
	secrets.MaintenanceServiceCertsType:      maintenanceWhy,

	etcd.ConfigType:       etcdWhy,
	etcd.SpecType:         etcdWhy,
	etcd.PKIStatusType:    etcdWhy,
	secrets.EtcdRootType:  etcdWhy,
	secrets.EtcdType:      etcdWhy,
	files.EtcFileSpecType: "the node's /etc files (hosts, resolv.conf) are written by the controllers that own their content, without the files namespace",
	files.EtcFileStatusType: "the node's /etc files (hosts, resolv.conf) are written by the controllers that own their content, " +
		"without the files namespace",

	block.VolumeConfigType:            volumesWhy,
	block.VolumeLifecycleType:         volumesWhy,
	block.VolumeMountRequestType:      volumesWhy,
	block.VolumeMountStatusType:       volumesWhy,
	block.MountRequestType:            volumesWhy,
	block.MountStatusType:             volumesWhy,
	runtimeres.MountStatusType:        volumesWhy,
	block.SystemDiskType:              volumesWhy,
	block.UserDiskConfigStatusType:    volumesWhy,
	block.DiscoveryRefreshRequestType: "not yet: block devices are probed on their uevents, never on request",
	block.DiscoveryRefreshStatusType:  "not yet: block devices are probed on their uevents, never on request",
	block.SwapStatusType:              "not supported: no swap (SwapVolumeConfig)",
	block.ZswapStatusType:             "not supported: no zswap (ZswapConfig)",
	secrets.EncryptionSaltType:        "not yet: the disk encryption keys are derived by internal/encryption, which publishes no salt",

	v1alpha1.AcquireConfigSpecType:        "the boot sequence acquires the config itself (saved, --config, platform, maintenance), not through resources",
	v1alpha1.AcquireConfigStatusType:      "the boot sequence acquires the config itself (saved, --config, platform, maintenance), not through resources",
	runtimeres.MetaLoadedType:             "META is read before the controllers start (server.SyncMetaKeys)",
	runtimeres.MachineResetSignalType:     "a reset is a sequence run by the Reset call, not a resource signal",
	runtimeres.KernelParamSpecType:        "KernelParamController writes the config's values straight to /sys and publishes KernelParamStatus only",
	runtimeres.KernelParamDefaultSpecType: "not yet: the node applies no default kernel parameters of its own",
	runtimeres.LoadedKernelModuleType:     "not yet: the loaded modules (/proc/modules) are not published",
	runtimeres.UniqueMachineTokenType:     "not yet",
	runtimeres.BootedEntryType:            "not yet: the booted systemd-boot entry of a UKI boot is not published",
	runtimeres.DevicesStatusType:          "not yet: udevd's settle state is not published",
	runtimeres.DiagnosticType:             "not yet: no diagnostics (upstream's warnings such as overlapping addresses)",
	timeres.AdjtimeStatusType:             "not yet: the kernel clock's adjtimex state is not published",

	hardware.MemoryModuleType:          "not yet: the SMBIOS memory devices are not read",
	hardware.PCIDeviceType:             "not yet: PCI devices are not published",
	hardware.PCRStatusType:             "not yet: the TPM's PCR extensions are not published",
	hardware.PCIDriverRebindConfigType: "not supported: PCI driver rebinding (PCIDriverRebindConfig)",
	hardware.PCIDriverRebindStatusType: "not supported: PCI driver rebinding (PCIDriverRebindConfig)",
	perf.CPUType:                       "not yet: CPU statistics are served by the SystemStat call, not as a resource",
	perf.MemoryType:                    "not yet: memory statistics are served by the Memory call, not as a resource",

	network.DeviceConfigSpecType:  "ConfigSpecController reads the config's interfaces straight into link, address and route specs",
	network.TimeServerSpecType:    "the config's (and the platform's) time servers go straight to time sync, which publishes TimeServerStatus",
	network.NodeAddressFilterType: "NodeAddressController publishes the node's addresses unfiltered; their users (kubelet's node IP, etcd) filter them",
	network.HardwareAddrType:      "not yet: the first link's hardware address is not published",
	network.LinkRefreshType:       "not needed: links are re-read on every netlink event",
	network.EthernetSpecType:      "network.EthernetController applies the EthernetConfig documents straight to the links and publishes EthernetStatus only",
	network.ProbeSpecType:         "not yet: no connectivity probes",
	network.ProbeStatusType:       "not yet: no connectivity probes",

	cluster.InfoType:             "not yet: the cluster's id and name are read from the machine config by their users",
	kubeaccess.ConfigType:        "TalosAPIAccessController reads machine.features.kubernetesTalosAPIAccess from the machine config",
	cri.RegistriesConfigType:     "RegistriesController writes containerd's hosts files straight from the machine config",
	cri.ImageCacheConfigType:     "not supported: the image cache is the node image's, imported at boot (no ImageCacheConfig)",
	k8s.ExtraManifestsConfigType: "ExtraManifestController reads the extra manifests from the machine config",
	k8s.ConfigStatusType:         "not yet: the control plane's config files are written without a status resource",
	k8s.SecretsStatusType:        "not yet: the Kubernetes secrets' files are written without a status resource",
	k8s.NodeStatusType:           "not yet: the Kubernetes Node's status is not watched into a resource",
	k8s.EndpointType:             "not yet: the API servers' endpoints are not published (KubePrism reads the members)",
	k8s.KubeletLifecycleType:     "not yet: kubelet's shutdown is ordered by the shutdown sequence, not by this resource",
}

const (
	sideroLinkWhy  = "not supported: SideroLink (Omni's WireGuard tunnel)"
	extensionsWhy  = "not supported yet: system extensions' services"
	maintenanceWhy = "the maintenance API is machined's own listener, started by the boot sequence with its certificate in memory"
	etcdWhy        = "the etcd service builds its flags and certificates from the machine config itself (internal/etcd)"
	volumesWhy     = "the boot sequence mounts the node's volumes (STATE, EPHEMERAL, user volumes) itself, without volume resources"
)

// For are the definitions a node of this kind registers.
func For(node configsupport.Node) []meta.ResourceWithRD {
	var defs []meta.ResourceWithRD

	for _, d := range Definitions {
		if only, ok := onlyOn[d.ResourceDefinition().Type]; ok && !slices.Contains(only.on, node) {
			continue
		}

		defs = append(defs, d)
	}

	return defs
}
