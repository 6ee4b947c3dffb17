package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/version"
)

// LocalAffiliateController publishes this node's Affiliate (namespace cluster, ID the node
// ID): what the registries tell the other nodes about it.
type LocalAffiliateController struct{}

// Name implements controller.Controller.
func (ctrl *LocalAffiliateController) Name() string { return "cluster.LocalAffiliateController" }

// Inputs implements controller.Controller.
func (ctrl *LocalAffiliateController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: cluster.ConfigType, ID: optional.Some(cluster.ConfigID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineTypeType, ID: optional.Some(config.MachineTypeID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.IdentityType, ID: optional.Some(cluster.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.HostnameStatusType, ID: optional.Some(network.HostnameID), Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.NodeAddressType, ID: optional.Some(network.NodeAddressCurrentID), Kind: controller.InputWeak},
		{Namespace: k8s.ControlPlaneNamespaceName, Type: k8s.APIServerConfigType, ID: optional.Some(k8s.APIServerConfigID), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.IdentityType, ID: optional.Some(kubespan.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: kubespan.ConfigType, ID: optional.Some(kubespan.ConfigID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: network.AddressStatusType, Kind: controller.InputWeak}, // the public address
	}
}

// Outputs implements controller.Controller.
func (ctrl *LocalAffiliateController) Outputs() []controller.Output {
	// Shared: the merge controller writes the other nodes' affiliates beside this one.
	return []controller.Output{{Type: cluster.AffiliateType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *LocalAffiliateController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		spec, err := localAffiliate(ctx, r)
		if err != nil {
			return err
		}

		r.StartTrackingOutputs()

		if spec != nil {
			if err = safe.WriterModify(ctx, r, cluster.NewAffiliate(cluster.NamespaceName, spec.NodeID), func(res *cluster.Affiliate) error {
				*res.TypedSpec() = *spec

				return nil
			}); err != nil {
				return fmt.Errorf("writing the local affiliate: %w", err)
			}
		}

		if err = safe.CleanupOutputs[*cluster.Affiliate](ctx, r); err != nil {
			return err
		}
	}
}

// readOptional reads the resource of type T with id; nil when it does not exist (yet).
func readOptional[T generic.ResourceWithRD](ctx context.Context, r controller.Reader, id resource.ID) (T, error) {
	res, err := safe.ReaderGetByID[T](ctx, r, id)
	if state.IsNotFoundError(err) {
		var zero T

		return zero, nil
	}

	return res, err
}

// localAffiliate is this node's affiliate; nil while an input is missing, and while no
// registry is on (as upstream's: without one the node is nobody's affiliate, itself included,
// so discovery off lists no members).
//
//nolint:gocyclo,cyclop // one input after the other
func localAffiliate(ctx context.Context, r controller.Reader) (*cluster.AffiliateSpec, error) {
	disc, err := readOptional[*cluster.Config](ctx, r, cluster.ConfigID)
	if err != nil || disc == nil {
		return nil, err
	}

	if d := disc.TypedSpec(); !d.DiscoveryEnabled || (!d.RegistryServiceEnabled && !d.RegistryKubernetesEnabled) {
		return nil, nil
	}

	cfg, err := readOptional[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil || cfg == nil || cfg.Config().Cluster() == nil {
		return nil, err
	}

	typ, err := readOptional[*config.MachineType](ctx, r, config.MachineTypeID)
	if err != nil || typ == nil {
		return nil, err
	}

	identity, err := readOptional[*cluster.Identity](ctx, r, cluster.LocalIdentity)
	if err != nil || identity == nil {
		return nil, err
	}

	hostname, err := readOptional[*network.HostnameStatus](ctx, r, network.HostnameID)
	if err != nil || hostname == nil {
		return nil, err
	}

	nodename, err := readOptional[*k8s.Nodename](ctx, r, k8s.NodenameID)
	if err != nil || nodename == nil {
		return nil, err
	}

	addrs, err := readOptional[*network.NodeAddress](ctx, r, network.NodeAddressCurrentID)
	if err != nil || addrs == nil {
		return nil, err
	}

	spec := &cluster.AffiliateSpec{
		NodeID:          identity.TypedSpec().NodeID,
		Hostname:        hostname.TypedSpec().FQDN(),
		Nodename:        nodename.TypedSpec().Nodename,
		MachineType:     typ.MachineType(),
		OperatingSystem: fmt.Sprintf("%s (%s)", version.Name, version.Tag),
	}

	if spec.MachineType.IsControlPlane() {
		api, err := readOptional[*k8s.APIServerConfig](ctx, r, k8s.APIServerConfigID)
		if err != nil {
			return nil, err
		}

		if api != nil {
			spec.ControlPlane = &cluster.ControlPlane{APIServerPort: api.TypedSpec().LocalPort}
		}
	}

	ks, err := readOptional[*kubespan.Identity](ctx, r, kubespan.LocalIdentity)
	if err != nil {
		return nil, err
	}

	ksCfg, err := readOptional[*kubespan.Config](ctx, r, kubespan.ConfigID)
	if err != nil {
		return nil, err
	}

	// Addresses in the pod and service subnets (flannel's and the CNI bridge's) reach the node
	// only from inside the cluster network, and the KubeSpan network only through the tunnel:
	// the others are not given them, as upstream's affiliates leave them out (etcd joins and
	// KubePrism would try them in vain).
	c := cfg.Config().Cluster()
	podNets := parsePrefixes(c.Network().PodCIDRs())
	clusterNets := slices.Concat(podNets, parsePrefixes(c.Network().ServiceCIDRs()))

	if ks != nil {
		clusterNets = append(clusterNets, ks.TypedSpec().Subnet)
	}

	// The node's own pod networks, which KubeSpan may advertise.
	var pods []netip.Prefix

	for _, p := range addrs.TypedSpec().Addresses {
		if slices.ContainsFunc(podNets, func(n netip.Prefix) bool { return n.Contains(p.Addr()) }) && !slices.Contains(pods, p.Masked()) {
			pods = append(pods, p.Masked())
		}

		if !slices.ContainsFunc(clusterNets, func(n netip.Prefix) bool { return n.Contains(p.Addr()) }) && !slices.Contains(spec.Addresses, p.Addr()) {
			spec.Addresses = append(spec.Addresses, p.Addr())
		}
	}

	if ks != nil && ksCfg != nil {
		// The addresses registries saw the node at (behind NAT, its public one) are endpoints too.
		public, err := safe.ReaderList[*network.AddressStatus](ctx, r, resource.NewMetadata(cluster.NamespaceName, network.AddressStatusType, "", resource.VersionUndefined))
		if err != nil {
			return nil, fmt.Errorf("listing the public addresses: %w", err)
		}

		endpointAddrs := slices.Clone(spec.Addresses)

		for a := range public.All() {
			if addr := a.TypedSpec().Address.Addr(); addr.IsValid() && !slices.Contains(endpointAddrs, addr) {
				endpointAddrs = append(endpointAddrs, addr)
			}
		}

		spec.KubeSpan = kubeSpanAffiliate(ks.TypedSpec(), ksCfg.TypedSpec(), endpointAddrs, pods)
	}

	return spec, nil
}

// kubeSpanAffiliate is this node's KubeSpan peer as the others see it: its key, its KubeSpan
// address and its WireGuard port on each of addrs (and the config's extra endpoints);
// with advertiseKubernetesNetworks, its pod networks, which the others then route to it
// through KubeSpan.
func kubeSpanAffiliate(id *kubespan.IdentitySpec, cfg *kubespan.ConfigSpec, addrs []netip.Addr, pods []netip.Prefix) cluster.KubeSpanAffiliateSpec {
	ks := cluster.KubeSpanAffiliateSpec{PublicKey: id.PublicKey, Address: id.Address.Addr()}

	for _, a := range addrs {
		if !a.IsLinkLocalUnicast() && a != ks.Address {
			ks.Endpoints = append(ks.Endpoints, netip.AddrPortFrom(a, constants.KubeSpanDefaultPort))
		}
	}

	for _, ep := range cfg.ExtraEndpoints {
		if !slices.Contains(ks.Endpoints, ep) {
			ks.Endpoints = append(ks.Endpoints, ep)
		}
	}

	if cfg.AdvertiseKubernetesNetworks {
		ks.AdditionalAddresses = pods
	}

	return ks
}

// parsePrefixes are the networks of cidrs (the config's, validated: a bad one is skipped).
func parsePrefixes(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))

	for _, cidr := range cidrs {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			out = append(out, p)
		}
	}

	return out
}
