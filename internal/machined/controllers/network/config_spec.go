package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
)

// ConfigSpecController turns the config's machine.network.interfaces into the specs of the
// links, addresses and routes the node sets (LinkSpec, AddressSpec, RouteSpec, layer
// "configuration"), as upstream's config controllers do. SpecController applies them. An
// interface is named by `interface` or picked by deviceSelector (every link whose status matches
// it, as the statuses change); a bond (members by name or deviceSelectors) or a bridge is a
// logical link its members join, a VLAN a logical link <interface>.<vlanId> on its interface.
type ConfigSpecController struct{}

// Name implements controller.Controller.
func (ctrl *ConfigSpecController) Name() string { return "network.ConfigSpecController" }

// Inputs implements controller.Controller.
func (ctrl *ConfigSpecController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		// deviceSelector picks links by what their statuses show.
		{Namespace: network.NamespaceName, Type: network.LinkStatusType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *ConfigSpecController) Outputs() []controller.Output {
	return []controller.Output{
		{Type: network.LinkSpecType, Kind: controller.OutputExclusive},
		// Shared with DHCP4Controller's leases.
		{Type: network.AddressSpecType, Kind: controller.OutputShared},
		{Type: network.RouteSpecType, Kind: controller.OutputShared},
		{Type: network.OperatorSpecType, Kind: controller.OutputExclusive},
	}
}

// Run implements controller.Controller.
func (ctrl *ConfigSpecController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		r.StartTrackingOutputs()

		links, err := safe.ReaderListAll[*network.LinkStatus](ctx, r)
		if err != nil {
			return err
		}

		if cfg != nil && cfg.Config().Machine() != nil {
			for _, dev := range cfg.Config().Machine().Network().Devices() {
				if err = ctrl.device(ctx, r, log, dev, links); err != nil {
					return err
				}
			}
		}

		// One cleanup for the types: it ends the tracking.
		if err = r.CleanupOutputs(ctx,
			resource.NewMetadata(network.NamespaceName, network.OperatorSpecType, "", resource.VersionUndefined),
			resource.NewMetadata(network.NamespaceName, network.LinkSpecType, "", resource.VersionUndefined),
			resource.NewMetadata(network.NamespaceName, network.AddressSpecType, "", resource.VersionUndefined),
			resource.NewMetadata(network.NamespaceName, network.RouteSpecType, "", resource.VersionUndefined),
		); err != nil {
			return err
		}

		return nil
	})
}

// selected names the links that match any of the selectors.
func selected(links safe.List[*network.LinkStatus], selectors ...talosconfig.NetworkDeviceSelector) []string {
	var names []string

	for link := range links.All() {
		for _, sel := range selectors {
			if matchesSelector(sel, link.TypedSpec()) {
				names = append(names, link.Metadata().ID())

				break
			}
		}
	}

	return names
}

// device writes the specs of one machine.network.interfaces entry: the interface it names, or
// every link its deviceSelector matches.
func (ctrl *ConfigSpecController) device(ctx context.Context, r controller.Runtime, log *zap.Logger, dev talosconfig.Device, links safe.List[*network.LinkStatus]) error {
	if dev.Ignore() {
		return nil
	}

	if dev.Interface() != "" {
		return ctrl.link(ctx, r, log, dev, dev.Interface(), links)
	}

	names := selected(links, dev.Selector())
	if len(names) == 0 {
		log.Warn("machine.network.interfaces: no link matches a deviceSelector yet")
	}

	for _, name := range names {
		if err := ctrl.link(ctx, r, log, dev, name, links); err != nil {
			return err
		}
	}

	return nil
}

// link writes the specs of the link name as dev configures it.
func (ctrl *ConfigSpecController) link(ctx context.Context, r controller.Runtime, log *zap.Logger, dev talosconfig.Device, name string, links safe.List[*network.LinkStatus]) error {

	link := network.LinkSpecSpec{Name: name, Up: true, MTU: uint32(max(dev.MTU(), 0)), ConfigLayer: network.ConfigMachineConfiguration}

	if bond := dev.Bond(); bond != nil {
		master, err := bondMaster(bond, links)
		if err != nil {
			return fmt.Errorf("machine.network.interfaces[%s].bond: %w", name, err)
		}

		link.Logical, link.Kind, link.Type, link.BondMaster = true, "bond", nethelpers.LinkEther, master

		members := slices.Clone(bond.Interfaces())

		if sels := bond.Selectors(); len(sels) > 0 {
			members = append(members, selected(links, sels...)...)
		}

		if len(members) == 0 {
			log.Warn("machine.network.interfaces: no member of the bond is there yet", zap.String("interface", name))
		}

		for i, member := range members {
			if err = writeLinkSpec(ctx, r, network.LinkSpecSpec{
				Name: member, Up: true, BondSlave: network.BondSlave{MasterName: name, SlaveIndex: i}, ConfigLayer: network.ConfigMachineConfiguration,
			}); err != nil {
				return err
			}
		}
	}

	if bridge := dev.Bridge(); bridge != nil {
		link.Logical, link.Kind, link.Type = true, "bridge", nethelpers.LinkEther
		link.BridgeMaster = network.BridgeMasterSpec{
			STP: network.STPSpec{Enabled: bridge.STP().Enabled()}, VLAN: network.BridgeVLANSpec{FilteringEnabled: bridge.VLAN().FilteringEnabled()},
		}

		for _, member := range bridge.Interfaces() {
			if err := writeLinkSpec(ctx, r, network.LinkSpecSpec{
				Name: member, Up: true, BridgeSlave: network.BridgeSlave{MasterName: name}, ConfigLayer: network.ConfigMachineConfiguration,
			}); err != nil {
				return err
			}
		}
	}

	// bridgePort.master is the inverse of the bridge's bridge.interfaces: this link joins it.
	if port := dev.BridgePort(); port != nil && port.Master() != "" {
		link.BridgeSlave = network.BridgeSlave{MasterName: port.Master()}
	}

	// A dummy link (machine.network.interfaces[].dummy), as upstream's: an Ethernet-type link
	// of kind dummy that the node makes, with the entry's addresses and routes.
	if dev.Dummy() {
		link.Logical, link.Kind, link.Type = true, "dummy", nethelpers.LinkEther
	}

	if wg := dev.WireguardConfig(); wg != nil {
		spec, err := wireguardSpec(name, wg)
		if err != nil {
			return err
		}

		link.Logical, link.Kind, link.Type, link.Wireguard = true, "wireguard", nethelpers.LinkNone, spec
	}

	if err := writeLinkSpec(ctx, r, link); err != nil {
		return err
	}

	if err := linkAddressesAndRoutes(ctx, r, name, dev.Addresses(), dev.Routes()); err != nil {
		return err
	}

	if dev.DHCP() {
		if err := writeDHCP(ctx, r, name, dev.DHCPOptions()); err != nil {
			return err
		}
	}

	if err := writeVIP(ctx, r, name, dev.VIPConfig()); err != nil {
		return err
	}

	// A VLAN is a link of its own on the interface, named <interface>.<id> as upstream's.
	for _, vlan := range dev.Vlans() {
		vname := fmt.Sprintf("%s.%d", name, vlan.ID())

		if err := writeLinkSpec(ctx, r, network.LinkSpecSpec{
			Name: vname, Logical: true, Up: true, MTU: vlan.MTU(), Kind: "vlan", Type: nethelpers.LinkEther, ParentName: name,
			VLAN: network.VLANSpec{VID: vlan.ID(), Protocol: nethelpers.VLANProtocol8021Q}, ConfigLayer: network.ConfigMachineConfiguration,
		}); err != nil {
			return err
		}

		if err := linkAddressesAndRoutes(ctx, r, vname, vlan.Addresses(), vlan.Routes()); err != nil {
			return err
		}

		if vlan.DHCP() {
			if err := writeDHCP(ctx, r, vname, vlan.DHCPOptions()); err != nil {
				return err
			}
		}

		if err := writeVIP(ctx, r, vname, vlan.VIPConfig()); err != nil {
			return err
		}
	}

	return nil
}

// writeDHCP asks DHCP4Controller to keep a lease on link (unless the options turn IPv4 off),
// its default route with the options' metric (upstream's 1024 when none), and DHCP6Controller
// to keep one when the options turn IPv6 on (with their duidv6).
func writeDHCP(ctx context.Context, r controller.Runtime, link string, opts talosconfig.DHCPOptions) error {
	metric := uint32(network.DefaultRouteMetric)
	v4, v6, duid := true, false, ""

	if opts != nil {
		v4, v6, duid = opts.IPv4(), opts.IPv6(), opts.DUIDv6()

		if opts.RouteMetric() != 0 {
			metric = opts.RouteMetric()
		}
	}

	for _, op := range []struct {
		on   bool
		spec network.OperatorSpecSpec
	}{
		{v4, network.OperatorSpecSpec{Operator: network.OperatorDHCP4, DHCP4: network.DHCP4OperatorSpec{RouteMetric: metric}}},
		{v6, network.OperatorSpecSpec{Operator: network.OperatorDHCP6, DHCP6: network.DHCP6OperatorSpec{RouteMetric: metric, DUID: duid}}},
	} {
		if !op.on {
			continue
		}

		id := op.spec.Operator.String() + "/" + link

		if err := safe.WriterModify(ctx, r, network.NewOperatorSpec(network.NamespaceName, id), func(res *network.OperatorSpec) error {
			*res.TypedSpec() = op.spec
			res.TypedSpec().LinkName, res.TypedSpec().RequireUp, res.TypedSpec().ConfigLayer = link, true, network.ConfigMachineConfiguration

			return nil
		}); err != nil {
			return fmt.Errorf("writing the operator spec %s: %w", id, err)
		}
	}

	return nil
}

// wireguardSpec is a WireGuard link's machine.network.interfaces[].wireguard.
func wireguardSpec(name string, wg talosconfig.WireguardConfig) (network.WireguardSpec, error) {
	spec := network.WireguardSpec{PrivateKey: wg.PrivateKey(), ListenPort: wg.ListenPort(), FirewallMark: wg.FirewallMark()}

	for _, p := range wg.Peers() {
		peer := network.WireguardPeer{PublicKey: p.PublicKey(), Endpoint: p.Endpoint(), PersistentKeepaliveInterval: p.PersistentKeepaliveInterval()}

		for _, a := range p.AllowedIPs() {
			prefix, err := netip.ParsePrefix(a)
			if err != nil {
				return spec, fmt.Errorf("machine.network.interfaces[%s].wireguard.peers: allowedIPs %q: %w (give networks like 10.1.0.0/24)", name, a, err)
			}

			peer.AllowedIPs = append(peer.AllowedIPs, prefix)
		}

		spec.Peers = append(spec.Peers, peer)
	}

	return spec, nil
}

// writeVIP asks VIPController to hold the link's shared address when this node is elected.
func writeVIP(ctx context.Context, r controller.Runtime, link string, vip talosconfig.VIPConfig) error {
	if vip == nil || vip.IP() == "" {
		return nil
	}

	ip, err := netip.ParseAddr(vip.IP())
	if err != nil {
		return fmt.Errorf("machine.network.interfaces[%s].vip.ip %q: %w (give an address like 10.5.0.50)", link, vip.IP(), err)
	}

	id := "vip/" + link

	return safe.WriterModify(ctx, r, network.NewOperatorSpec(network.NamespaceName, id), func(res *network.OperatorSpec) error {
		*res.TypedSpec() = network.OperatorSpecSpec{
			Operator: network.OperatorVIP, LinkName: link, RequireUp: true,
			VIP: network.VIPOperatorSpec{IP: ip, GratuitousARP: true}, ConfigLayer: network.ConfigMachineConfiguration,
		}

		return nil
	})
}

func writeLinkSpec(ctx context.Context, r controller.Runtime, spec network.LinkSpecSpec) error {
	if err := safe.WriterModify(ctx, r, network.NewLinkSpec(network.NamespaceName, network.LinkID(spec.Name)),
		func(res *network.LinkSpec) error {
			*res.TypedSpec() = spec

			return nil
		}); err != nil {
		return fmt.Errorf("writing the link spec of %s: %w", spec.Name, err)
	}

	return nil
}

// linkAddressesAndRoutes writes the address and route specs of one link.
func linkAddressesAndRoutes(ctx context.Context, r controller.Runtime, name string, addresses []string, routes []talosconfig.Route) error {
	for _, a := range addresses {
		prefix, err := netip.ParsePrefix(a)
		if err != nil { // validation refuses it before
			return fmt.Errorf("machine.network.interfaces[%s].addresses: %q: %w", name, a, err)
		}

		id := network.AddressID(name, prefix)
		if err = safe.WriterModify(ctx, r, network.NewAddressSpec(network.NamespaceName, id), func(res *network.AddressSpec) error {
			*res.TypedSpec() = network.AddressSpecSpec{
				Address: prefix, LinkName: name, Family: familyOf(prefix.Addr()), Scope: nethelpers.ScopeGlobal,
				Flags: nethelpers.AddressFlags(nethelpers.AddressPermanent), ConfigLayer: network.ConfigMachineConfiguration,
			}

			return nil
		}); err != nil {
			return fmt.Errorf("writing the address spec of %s: %w", id, err)
		}
	}

	for _, route := range routes {
		spec := network.RouteSpecSpec{
			OutLinkName: name, Table: nethelpers.TableMain, Priority: route.Metric(), Type: nethelpers.TypeUnicast,
			Protocol: nethelpers.ProtocolStatic, MTU: route.MTU(), ConfigLayer: network.ConfigMachineConfiguration,
		}

		var err error

		if route.Network() != "" {
			if spec.Destination, err = netip.ParsePrefix(route.Network()); err != nil {
				return fmt.Errorf("machine.network.interfaces[%s].routes: network %q: %w", name, route.Network(), err)
			}
		}

		if route.Gateway() != "" {
			if spec.Gateway, err = netip.ParseAddr(route.Gateway()); err != nil {
				return fmt.Errorf("machine.network.interfaces[%s].routes: gateway %q: %w", name, route.Gateway(), err)
			}
		}

		if route.Source() != "" {
			if spec.Source, err = netip.ParseAddr(route.Source()); err != nil {
				return fmt.Errorf("machine.network.interfaces[%s].routes: source %q: %w", name, route.Source(), err)
			}
		}

		if spec.Priority == 0 {
			spec.Priority = 1024 // upstream's default metric of a configured route
		}

		spec.Normalize() // 0.0.0.0 to none, and the scope

		switch {
		case spec.Gateway.IsValid():
			spec.Family = familyOf(spec.Gateway)
		case spec.Destination.IsValid():
			spec.Family = familyOf(spec.Destination.Addr())
		default:
			spec.Family = nethelpers.FamilyInet4
		}

		id := network.RouteID(spec.Table, spec.Family, spec.Destination, spec.Gateway, spec.Priority, name)
		if err = safe.WriterModify(ctx, r, network.NewRouteSpec(network.NamespaceName, id), func(res *network.RouteSpec) error {
			*res.TypedSpec() = spec

			return nil
		}); err != nil {
			return fmt.Errorf("writing the route spec of %s: %w", id, err)
		}
	}

	return nil
}

func familyOf(a netip.Addr) nethelpers.Family {
	if a.Is6() {
		return nethelpers.FamilyInet6
	}

	return nethelpers.FamilyInet4
}
