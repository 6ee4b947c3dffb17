package testenv

import (
	"reflect"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/talos-go/talos/internal/machined/resources"
)

// RequiredFields are the spec fields (Go names, "A.B" for nested) upstream's v1.11 controllers
// always set on every resource of the type, so tools may rely on them. Only fields whose
// upstream writer sets them unconditionally are listed: a field upstream may leave empty (a
// worker's issuing CA, a node's resolvers) is not.
var RequiredFields = map[resource.Type][]string{
	config.MachineTypeType: {"Type"}, // from the config's machine.type

	// network: HostnameSpec/Status always carry a hostname (the config's, the platform's or
	// the default talos-xxx); statuses are the kernel's links, addresses and routes.
	network.HostnameSpecType:   {"Hostname"},
	network.HostnameStatusType: {"Hostname"},
	network.LinkStatusType:     {"Index", "MTU"},
	network.AddressStatusType:  {"Address", "LinkName", "Family"},
	network.RouteStatusType:    {"Family", "Table"},
	network.LinkSpecType:       {"Name"},
	network.AddressSpecType:    {"Address", "LinkName", "Family"},
	network.RouteSpecType:      {"Family"},
	network.OperatorSpecType:   {"LinkName"},
	network.NfTablesChainType:  {"Type"},
	network.StatusType:         {"AddressReady", "HostnameReady", "EtcFilesReady"}, // true once the node is ready

	// runtime: a Service resource exists only while its service runs (upstream destroys it on
	// any other state); MachineStatus always has a stage past unknown.
	v1alpha1.ServiceType:               {"Running"},
	runtimeres.MachineStatusType:       {"Stage"},
	runtimeres.VersionType:             {"Version"},
	runtimeres.SBOMItemType:            {"Name", "Version"},
	runtimeres.PlatformMetadataType:    {"Platform"},
	runtimeres.KernelModuleSpecType:    {"Name"},
	runtimeres.KernelCmdlineType:       {"Cmdline"},
	runtimeres.WatchdogTimerConfigType: {"Device", "Timeout"},
	runtimeres.WatchdogTimerStatusType: {"Device", "Timeout", "FeedInterval"},
	runtimeres.EventSinkConfigType:     {"Endpoint"},
	runtimeres.KmsgLogConfigType:       {"Destinations"},

	// secrets: the certificates every node serves with and the CAs it accepts.
	secrets.APIType:                    {"AcceptedCAs", "Server"},
	secrets.TrustdType:                 {"AcceptedCAs", "Server"},
	secrets.OSRootType:                 {"AcceptedCAs", "Token"},
	secrets.CertSANType:                {"IPs", "DNSNames"},
	secrets.KubernetesType:             {"SchedulerKubeconfig", "ControllerManagerKubeconfig", "LocalhostAdminKubeconfig", "AdminKubeconfig"},
	secrets.KubernetesDynamicCertsType: {"APIServer", "APIServerKubeletClient", "FrontProxy"},
	secrets.KubeletType:                {"Endpoint", "AcceptedCAs", "BootstrapTokenID", "BootstrapTokenSecret"},
	secrets.KubernetesRootType: {
		"Name", "Endpoint", "LocalEndpoint", "DNSDomain", "IssuingCA", "AcceptedCAs", "ServiceAccount", "AggregatorCA",
		"BootstrapTokenID", "BootstrapTokenSecret",
	},

	// cluster and etcd: identities and what discovery publishes of each member.
	etcdres.MemberType:     {"MemberID"},
	cluster.IdentityType:   {"NodeID"},
	cluster.MemberType:     {"NodeID", "Addresses", "Hostname", "MachineType", "OperatingSystem"},
	cluster.AffiliateType:  {"NodeID", "Addresses", "Hostname", "MachineType", "OperatingSystem"},
	kubespan.IdentityType:  {"Address", "Subnet", "PrivateKey", "PublicKey"},
	kubespan.PeerSpecType:  {"Address", "Label"},
	kubespan.EndpointType:  {"AffiliateID", "Endpoint"},
	block.DiskType:         {"DevPath", "Size"},
	block.DeviceType:       {"Type", "DevicePath"},
	block.SymlinkType:      {"Paths"},
	block.VolumeStatusType: {"Phase", "Type"},

	// Kubernetes: the control plane's configs from the config's cluster section.
	k8s.APIServerConfigType:          {"Image", "ControlPlaneEndpoint", "EtcdServers", "LocalPort", "ServiceCIDRs", "AdvertisedAddress"},
	k8s.ControllerManagerConfigType:  {"Image", "PodCIDRs", "ServiceCIDRs"},
	k8s.SchedulerConfigType:          {"Image"},
	k8s.BootstrapManifestsConfigType: {"Server", "ClusterDomain", "PodCIDRs", "DNSServiceIP"},
	k8s.AdmissionControlConfigType:   {"Config"},
	k8s.AuditPolicyConfigType:        {"Config"},
	k8s.AuthorizationConfigType:      {"Image", "Config"},
	k8s.KubePrismEndpointsType:       {"Endpoints"},
	k8s.KubePrismConfigType:          {"Host", "Port", "Endpoints"},
	k8s.KubePrismStatusesType:        {"Host"},
	k8s.StaticPodType:                {"Pod"},
	k8s.StaticPodStatusType:          {"PodStatus"},
	k8s.StaticPodServerStatusType:    {"URL"},
	k8s.KubeletSpecType:              {"Image", "Args", "ExpectedNodename", "Config"},
	k8s.KubeletConfigType:            {"Image", "ClusterDNS", "ClusterDomain"},
	k8s.NodenameType:                 {"Nodename", "HostnameVersion"},
	k8s.NodeIPType:                   {"Addresses"},
	k8s.NodeIPConfigType:             {"ValidSubnets"},
	k8s.ManifestType:                 {"Items"},
	k8s.ManifestStatusType:           {"ManifestsApplied"},
	k8s.NodeLabelSpecType:            {"Key"},
	k8s.NodeAnnotationSpecType:       {"Key"},
	k8s.NodeTaintSpecType:            {"Key", "Effect"},
	cri.SeccompProfileType:           {"Name", "Value"},
}

// OwnTypes are the registered types that are ours, not machinery's: nothing in machinery
// defines them, so no upstream tool reads them.
var OwnTypes = map[resource.Type]string{
	resources.JoinRequestType:  joinWhy,
	resources.JoinDecisionType: joinWhy,
	resources.JoinStatusType:   joinWhy,
}

const joinWhy = "join approval (talosctl join), our addition"

// NotOnTheWire are the machinery types machinery registers no protobuf decoder for: upstream's
// clients, as ours, receive them as generic resources (their YAML form), not as the type.
var NotOnTheWire = map[resource.Type]string{
	network.DNSUpstreamType: "its spec holds the live connection to the upstream resolver; machinery does not register it for protobuf",
}

// rawKernelFlags are machinery flag sets that upstream fills with the kernel's flags as they
// come, bits machinery gives no name included: their text form drops those bits, in upstream's
// answers too.
var rawKernelFlags = map[reflect.Type]string{
	reflect.TypeFor[nethelpers.RouteFlags](): "upstream copies rtm_flags, where a route's next-hop flags (RTNH_F_ONLINK = 4 on flannel's routes) sit unnamed",
}
