// Package controllers is the list of machined's controllers: every controller the node runs is
// registered here, each built from what the node knows at start. The controllers themselves
// live in one package per namespace of their outputs, one controller per file.
package controllers

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/images"
	blockctrl "github.com/talos-go/talos/internal/machined/controllers/block"
	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	clusterk8sctrl "github.com/talos-go/talos/internal/machined/controllers/cluster/kubernetes"
	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	controlplanectrl "github.com/talos-go/talos/internal/machined/controllers/controlplane"
	crictrl "github.com/talos-go/talos/internal/machined/controllers/cri"
	etcdctrl "github.com/talos-go/talos/internal/machined/controllers/etcd"
	hardwarectrl "github.com/talos-go/talos/internal/machined/controllers/hardware"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	kubespanctrl "github.com/talos-go/talos/internal/machined/controllers/kubespan"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/controllers/timesync"
	"github.com/talos-go/talos/internal/machined/events"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/trustbundle"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/trustd"
	"github.com/talos-go/talos/internal/uki"
	"github.com/talos-go/talos/internal/version"
)

// Options are what the controllers need from the node.
type Options struct {
	// Address is the node's address: the seed of its generated hostname, the source of its
	// calls to trustd and, when it shares the host, its one NodeAddress. Empty when it has none.
	Address string
	// Mode is the kind of node. One that shares the host (process mode) is reached on its
	// loopback address whatever the host's links hold, and its hostname is only recorded, as the
	// kernel's is the host's. One on its own kernel (metal) sets the kernel's parameters and
	// keeps its clock. One that owns its machine (metal as PID 1) runs udevd's controllers:
	// block devices from uevents, their probes, /dev/disk links (they write the machine's
	// /dev), and reports the machine's kernel command line and security state (firmware, UKI).
	// One that runs kubelet runs the controllers that talk to it and to the API server too (the
	// resources they build on are computed on every node).
	Mode runtime.Mode
	// DHCPLinks are the links whose DHCP leases the node keeps (a metal boot's, without ip=).
	DHCPLinks []string
	// DHCP6Links are the links whose DHCPv6 leases the node keeps (the boot's).
	DHCP6Links []string
	// LoadModule loads a kernel module (metal); nil: none is loaded.
	LoadModule func(name string) error
	// LoadModuleWith loads a kernel module with parameters, for machine.kernel.modules (metal);
	// nil: the config's modules are not loaded.
	LoadModuleWith func(name string, params []string) error
	// LoadModalias loads the modules a new device's modalias names (metal); nil: none.
	LoadModalias func(modalias string) ([]string, error)
	// StateDir is the STATE folder, where the node id is kept.
	StateDir string
	// APIDSecretsDir and TrustdSecretsDir are the folders apid and trustd read their
	// certificates from.
	APIDSecretsDir, TrustdSecretsDir string
	// KubernetesSecretsDir, KubeletDir, KubernetesConfigDir and AuditLogDir are where the
	// Kubernetes secrets, kubelet's bootstrap files, the control plane's config files and the
	// API server's audit log go (/system/secrets/kubernetes, /etc/kubernetes,
	// /system/config/kubernetes, /var/log/audit/kube on a node in its own root).
	KubernetesSecretsDir, KubeletDir, KubernetesConfigDir, AuditLogDir string
	// CertLifetime is the lifetime of the certificates the node issues itself (machined's
	// --cert-lifetime); zero: secretsctrl.DefaultLifetime.
	CertLifetime time.Duration
	// Etcd is the node's etcd member; EtcdClient gives a client of it (the VIP elections').
	Etcd       etcdctrl.StatusSource
	EtcdClient func(ctx context.Context) (*clientv3.Client, error)
	// TimeLog is where time sync logs its syncs (the controllers' own log shows warnings only).
	TimeLog *zap.Logger
	// Root is the node's root folder; DNSLog is where its host DNS logs.
	Root   string
	DNSLog *zap.Logger
	// RegistryHostsDir is containerd's registry hosts folder (its config_path).
	RegistryHostsDir string
	// Events is the node's event bus: MachineStatus changes are published on it, and an
	// EventSinkConfig sends on it; nil: neither.
	Events *events.Bus
	// Platform is what the platform the node booted on said (internal/platform): its
	// PlatformMetadata, and the hostname, name servers and time servers under the config's.
	// Nil: none (a node not booted by the metal initramfs).
	Platform *platform.Published
}

// List is every controller of the node.
func List(opts Options) []controller.Controller {
	nodeAddresses := &networkctrl.NodeAddressController{}
	applyHostname := networkctrl.SetKernelHostname

	if opts.Mode.ContainerNode() {
		applyHostname = container.ApplyHostname
	}

	if opts.Mode.SharesHost() {
		addr, _ := netip.ParseAddr(opts.Address) // checked by the node before
		nodeAddresses.Static = []netip.Addr{addr}
		applyHostname = nil
	}

	// The node's trust bundle: the system's roots (the image's, kept aside by the node's init;
	// a node on the host's root: the host's) and the config's TrustedRootsConfig roots.
	bundle, systemRoots := filepath.Join(opts.Root, trustbundle.Node), trustbundle.Etc
	if opts.Root == "/" {
		systemRoots = trustbundle.System
	}

	seccompDir := ""
	if opts.Mode.RunsKubernetes() {
		seccompDir = filepath.Join(opts.Root, constants.SeccompProfilesDirectory)
	}

	// The platform's network: its hostname, name servers and time servers, under the config's.
	var p platform.Network
	if opts.Platform != nil && opts.Platform.Network != nil {
		p = *opts.Platform.Network
	}

	list := slices.Concat([]controller.Controller{
		configctrl.NewMachineTypeController(),
		&hardwarectrl.SystemInformationController{},
		&hardwarectrl.ProcessorController{},
		&blockctrl.DiskController{},
		networkctrl.NewHostnameSpecController(opts.Address, p.Hostname),
		networkctrl.NewHostnameStatusController(applyHostname),
		nodeAddresses,
		networkctrl.NewNodeAddressSortAlgorithmController(),
		&networkctrl.LinkStatusController{},
		&networkctrl.AddressStatusController{},
		&networkctrl.ExternalAddressController{Addresses: p.ExternalIPs},
		&networkctrl.RouteStatusController{},
		&timesync.SyncController{Sync: opts.Mode.OwnKernel(), Log: opts.TimeLog, PlatformServers: p.TimeServers},
		&clusterctrl.IdentityController{StateDir: opts.StateDir},
		// Discovery as upstream's: the local affiliate out to the discovery service, the
		// others' back (raw), merged by node ID into affiliates, the members from those.
		clusterctrl.NewConfigController(),
		&clusterctrl.LocalAffiliateController{},
		&clusterctrl.DiscoveryServiceController{Roots: func() (*x509.CertPool, error) { return trustbundle.Pool(bundle) }},
		&clusterctrl.AffiliateMergeController{},
		&clusterctrl.MemberController{},
		&etcdctrl.MemberController{Etcd: opts.Etcd},
	}, secretsControllers(opts, systemRoots, bundle), []controller.Controller{
		controlplanectrl.NewAPIServerConfigController(),
		controlplanectrl.NewControllerManagerConfigController(),
		controlplanectrl.NewSchedulerConfigController(),
		controlplanectrl.NewAdmissionControlConfigController(),
		controlplanectrl.NewAuditPolicyConfigController(),
		controlplanectrl.NewAuthorizationConfigController(),
		controlplanectrl.NewBootstrapManifestsConfigController(),
		&controlplanectrl.ManifestController{},
		&controlplanectrl.ExtraManifestController{Roots: func() (*x509.CertPool, error) { return trustbundle.Pool(bundle) }},
		&k8sctrl.StaticPodController{SecretsDir: opts.KubernetesSecretsDir, ConfigDir: opts.KubernetesConfigDir, AuditLogDir: opts.AuditLogDir,
			AfterAPIReady: opts.Mode.RunsKubernetes()},
		&k8sctrl.StaticPodConfigController{},
		// The profiles' files only where a kubelet reads them (no host folder written otherwise).
		&crictrl.SeccompProfileController{Dir: seccompDir},
		k8sctrl.NewKubeletConfigController(),
		k8sctrl.NewKubeletSpecController(),
		&k8sctrl.NodeSpecController{},
		k8sctrl.NewNodeCordonedSpecController(),
		k8sctrl.NewNodenameController(),
		k8sctrl.NewNodeIPConfigController(),
		k8sctrl.NewNodeIPController(),
		// The kernel log and the events to the config's KmsgLogConfig and EventSinkConfig.
		runtimectrl.NewKmsgLogConfigController(),
		&runtimectrl.KmsgLogDeliveryController{},
		runtimectrl.NewEventSinkConfigController(),
		&runtimectrl.VersionController{},
		&runtimectrl.SBOMItemController{Items: sbom(!opts.Mode.SharesHost(), opts.Mode.RunsKubernetes())},
		&runtimectrl.SecurityStateController{OwnsMachine: opts.Mode.OwnsMachine(), Efivars: "/sys/firmware/efi/efivars",
			PCRKey: filepath.Join(container.InitramfsDir, uki.PublicKeyFile), SELinux: "/sys/fs/selinux/enforce"},
		&networkctrl.StatusController{},
	})

	return append(list, modeControllers(opts, p)...)
}

// secretsControllers make the node's certificates and keys and write their files: the trust
// bundle, the Talos API's, trustd's and Kubernetes's.
func secretsControllers(opts Options, systemRoots, bundle string) []controller.Controller {
	// A control plane's kubelet gets its client certificate from the cluster CA where it runs.
	kubeletCertDir := ""
	if opts.Mode.RunsKubernetes() {
		kubeletCertDir = k8sctrl.KubeletCertDir
	}

	return []controller.Controller{
		&secretsctrl.TrustedRootsController{System: systemRoots, Bundle: bundle},
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.APIController{Address: opts.Address, KeyFile: filepath.Join(opts.StateDir, secretsctrl.NodeKeyFile), Lifetime: opts.CertLifetime},
		&secretsctrl.APIFilesController{Dir: opts.APIDSecretsDir},
		&secretsctrl.TrustdController{Lifetime: opts.CertLifetime},
		&secretsctrl.TrustdFilesController{Dir: opts.TrustdSecretsDir},
		&secretsctrl.JoinRequestsController{Dir: filepath.Join(opts.StateDir, trustd.JoinsDir)},
		secretsctrl.NewKubernetesRootController(),
		secretsctrl.NewKubernetesCertSANsController(),
		secretsctrl.NewKubeletController(),
		&secretsctrl.KubernetesDynamicCertsController{Lifetime: opts.CertLifetime},
		&secretsctrl.KubernetesController{Lifetime: opts.CertLifetime},
		&secretsctrl.KubernetesFilesController{SecretsDir: opts.KubernetesSecretsDir, KubeletDir: opts.KubeletDir,
			KubeletCertDir: kubeletCertDir, KubeletCertPath: k8sctrl.KubeletCertDir, Lifetime: opts.CertLifetime},
	}
}

// modeControllers are the controllers of the node's mode (Options.Mode) and of the options it
// was given: what a node on its own kernel, network or machine drives, and Kubernetes's.
func modeControllers(opts Options, p platform.Network) []controller.Controller {
	var list []controller.Controller

	if opts.Events != nil {
		list = append(list, &runtimectrl.EventsSinkController{Events: opts.Events}, &runtimectrl.MachineStatusPublisherController{Events: opts.Events})
	}

	if opts.Platform != nil {
		list = append(list, &runtimectrl.PlatformMetadataController{Spec: opts.Platform.Metadata})
	}

	// A node on its own kernel runs udevd: its block devices, their probes and links.
	if opts.Mode.OwnsMachine() {
		list = append(list, &blockctrl.UdevController{Sysfs: "/sys", LoadModalias: opts.LoadModalias},
			&blockctrl.DiscoveredVolumesController{Sysfs: "/sys", Dev: "/dev"}, &blockctrl.UserVolumesController{StateDir: opts.StateDir},
			// machine.udev.rules, on the devices' uevents; EthernetConfig on the machine's NICs.
			&blockctrl.UdevRulesController{Sysfs: "/sys", Dev: "/dev"}, &networkctrl.EthernetController{})
	}

	// A node in its own network namespace (a container node, a metal one) runs its resolvers
	// and host DNS; one that shares the host's reports the host's resolvers.
	if opts.Mode.OwnNetwork() {
		// A container node's /etc/hosts is its own file, bound over the image's.
		if opts.Mode.ContainerNode() {
			list = append(list, &networkctrl.EtcHostsController{Address: opts.Address, Path: container.HostsPath})
		}

		list = append(list, &networkctrl.ResolverController{Root: opts.Root, Log: opts.DNSLog, Platform: p.Resolvers},
			&crictrl.RegistriesController{Dir: opts.RegistryHostsDir},
			// The ingress firewall: the node's own network namespace only, never the host's.
			&networkctrl.NfTablesChainConfigController{}, &networkctrl.NfTablesChainController{LoadModule: opts.LoadModule})
	} else {
		list = append(list, &networkctrl.ResolverStatusController{})
	}

	if opts.Mode.OwnsMachine() {
		list = append(list, &runtimectrl.KernelCmdlineController{Path: "/proc/cmdline"})
	}

	// A node on its own kernel sets its kernel's parameters and its network from the config.
	if opts.Mode.OwnKernel() {
		list = append(list, &runtimectrl.KernelParamController{}, &networkctrl.ConfigSpecController{}, &networkctrl.SpecController{LoadModule: opts.LoadModule},
			&networkctrl.DHCP4Controller{Links: opts.DHCPLinks}, &networkctrl.DHCP6Controller{Links: opts.DHCP6Links},
			&networkctrl.VIPController{Etcd: opts.EtcdClient, Hostname: func() string { h, _ := os.Hostname(); return h }},
			// KubeSpan's WireGuard link is the node's kernel's.
			kubespanctrl.NewConfigController(), &kubespanctrl.IdentityController{StateDir: opts.StateDir},
			&kubespanctrl.PeerSpecController{}, &kubespanctrl.ManagerController{LoadModule: opts.LoadModule}, &kubespanctrl.EndpointController{},
			// The hardware watchdog is the machine's: only a node on its own kernel drives one.
			runtimectrl.NewWatchdogTimerConfigController(), &runtimectrl.WatchdogTimerController{})
	}

	// The config's kernel modules: a node on its own kernel only, from its image's modules.
	if opts.Mode.OwnKernel() && opts.LoadModuleWith != nil {
		list = append(list, &runtimectrl.KernelModuleController{Load: opts.LoadModuleWith})
	}

	if opts.Mode.RunsKubernetes() {
		list = append(list, &k8sctrl.ManifestApplyController{}, &k8sctrl.StaticPodServerController{},
			&k8sctrl.NodeApplyController{}, &k8sctrl.TalosAPIAccessController{},
			&k8sctrl.StaticPodStatusController{}, &k8sctrl.KubePrismController{},
			&clusterk8sctrl.KubernetesPushController{KubeletCert: k8sctrl.KubeletClientCert}, &clusterk8sctrl.KubernetesPullController{KubeletCert: k8sctrl.KubeletClientCert})
	}

	return list
}

// sbom is what the node carries, for its SBOMItems: machined (the talos-go version, built with
// its Go) and etcd everywhere; the node image's programs where the node runs from the image
// (not a process node, which runs from the host's files).
func sbom(image, kubernetes bool) []runtimeres.SBOMItemSpec {
	items := []runtimeres.SBOMItemSpec{
		{Name: "talos-go", Version: version.Tag},
		{Name: "go", Version: version.GoVersion()},
		{Name: "etcd", Version: images.EtcdVersion, PURLs: []string{"pkg:golang/go.etcd.io/etcd/server/v3@" + images.EtcdVersion}},
	}

	if image {
		for _, c := range imager.Components(kubernetes) {
			items = append(items, runtimeres.SBOMItemSpec{Name: c.Name, Version: c.Version})
		}
	}

	return items
}

// Register registers every controller of the node with rt.
func Register(rt *cosiruntime.Runtime, opts Options) error {
	for _, ctrl := range List(opts) {
		if err := rt.RegisterController(ctrl); err != nil {
			return fmt.Errorf("registering controller %s: %w", ctrl.Name(), err)
		}
	}

	return nil
}
