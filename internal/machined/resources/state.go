// Package resources builds machined's resource state: the namespaces and the resource
// definitions of the machinery types we serve, so `talosctl get <type>` resolves them.
package resources

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/talos-go/talos/internal/configsupport"
)

// Namespaces are the namespaces of node state, with their descriptions.
var Namespaces = []struct {
	Name, Description string
}{
	{config.NamespaceName, "Talos node configuration."},
	{secrets.NamespaceName, "Resources with secret material."},
	{network.NamespaceName, "Networking resources."},
	{network.ConfigNamespaceName, "Networking configuration resources."},
	{v1alpha1.NamespaceName, "Talos runtime resources."},
	{cluster.NamespaceName, "Cluster configuration and discovery resources."},
	{cluster.RawNamespaceName, "Cluster unmerged raw resources."},
	{etcd.NamespaceName, "etcd resources."},
	{k8s.NamespaceName, "Kubernetes all node types resources."},
	{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
	{hardware.NamespaceName, "Hardware resources."},
	{kubespan.NamespaceName, "KubeSpan resources."},
	{cri.NamespaceName, "CRI Seccomp resources."},
}

// Definitions are the resource types a node serves: For says which kinds of node register
// each. ExtensionStatus stays registered although our images carry no system extensions yet:
// the empty list is the true answer, and upstream's tools read it.
var Definitions = []meta.ResourceWithRD{
	&config.MachineConfig{},
	&config.MachineType{},
	&network.HostnameSpec{},
	&network.HostnameStatus{},
	&network.NodeAddress{},
	&network.NodeAddressSortAlgorithm{},
	&network.LinkStatus{},
	&network.AddressStatus{},
	&network.RouteStatus{},
	&network.ResolverStatus{},
	&network.TimeServerStatus{},
	&network.LinkSpec{},
	&network.AddressSpec{},
	&network.RouteSpec{},
	&network.ResolverSpec{},
	&network.OperatorSpec{},
	&network.NfTablesChain{},
	&network.HostDNSConfig{},
	&network.DNSUpstream{},
	&network.DNSResolveCache{},
	&network.Status{},
	&network.EthernetStatus{},
	&v1alpha1.Service{},
	&runtimeres.MachineStatus{},
	&runtimeres.MetaKey{},
	&runtimeres.KernelParamStatus{},
	&runtimeres.PlatformMetadata{},
	&runtimeres.KernelModuleSpec{},
	&runtimeres.KmsgLogConfig{},
	&runtimeres.EventSinkConfig{},
	&runtimeres.WatchdogTimerConfig{},
	&runtimeres.WatchdogTimerStatus{},
	&runtimeres.KernelCmdline{},
	&runtimeres.SecurityState{},
	&runtimeres.Version{},
	&runtimeres.SBOMItem{},
	&runtimeres.ExtensionStatus{},
	&secrets.API{},
	&secrets.Trustd{},
	&secrets.OSRoot{},
	&secrets.CertSAN{},
	&etcd.Member{},
	&cluster.Member{},
	&cluster.Identity{},
	&cluster.Affiliate{},
	&cluster.Config{},
	&kubespan.Config{},
	&kubespan.Identity{},
	&kubespan.PeerSpec{},
	&kubespan.PeerStatus{},
	&kubespan.Endpoint{},
	&timeres.Status{},
	&hardware.SystemInformation{},
	&hardware.Processor{},
	&block.Disk{},
	&block.Device{},
	&block.DiscoveredVolume{},
	&block.Symlink{},
	&block.VolumeStatus{},
	// Kubernetes: secrets, control plane configs and the k8s namespace, as upstream.
	&secrets.Kubernetes{},
	&secrets.KubernetesRoot{},
	&secrets.KubernetesDynamicCerts{},
	&secrets.Kubelet{},
	&k8s.APIServerConfig{},
	&k8s.ControllerManagerConfig{},
	&k8s.SchedulerConfig{},
	&k8s.BootstrapManifestsConfig{},
	&k8s.AdmissionControlConfig{},
	&k8s.AuditPolicyConfig{},
	&k8s.AuthorizationConfig{},
	&k8s.KubePrismEndpoints{},
	&k8s.KubePrismConfig{},
	&k8s.KubePrismStatuses{},
	&k8s.StaticPod{},
	&k8s.StaticPodStatus{},
	&k8s.StaticPodServerStatus{},
	&k8s.KubeletSpec{},
	&k8s.KubeletConfig{},
	&k8s.Nodename{},
	&k8s.NodeIP{},
	&k8s.NodeIPConfig{},
	&k8s.Manifest{},
	&k8s.ManifestStatus{},
	&k8s.NodeLabelSpec{},
	&k8s.NodeAnnotationSpec{},
	&k8s.NodeTaintSpec{},
	&k8s.NodeCordonedSpec{},
	&cri.SeccompProfile{},
}

// NewState creates an in-memory state with every namespace and every definition any node
// serves registered (controller tests use it).
func NewState(ctx context.Context) (state.State, error) {
	return newState(ctx, Definitions)
}

// NewNodeState creates the in-memory state of a node of this kind: every namespace, and the
// definitions of the types such a node fills (For).
func NewNodeState(ctx context.Context, node configsupport.Node) (state.State, error) {
	return newState(ctx, For(node))
}

func newState(ctx context.Context, defs []meta.ResourceWithRD) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	nsRegistry := registry.NewNamespaceRegistry(st)
	if err := nsRegistry.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("registering default namespaces: %w", err)
	}

	for _, ns := range Namespaces {
		if err := nsRegistry.Register(ctx, ns.Name, ns.Description); err != nil {
			return nil, fmt.Errorf("registering namespace %s: %w", ns.Name, err)
		}
	}

	rdRegistry := registry.NewResourceRegistry(st)
	if err := rdRegistry.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("registering default resource definitions: %w", err)
	}

	for _, r := range defs {
		if err := rdRegistry.Register(ctx, r); err != nil {
			return nil, fmt.Errorf("registering resource definition: %w", err)
		}
	}

	return st, nil
}
