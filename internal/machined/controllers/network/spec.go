package network

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/netlink"
)

// SpecController sets the links, addresses and routes of the specs on the node's kernel
// (metal): logical links (bonds, bridges, VLANs) created, their members joined, links up with
// their MTU, addresses and routes added. What it added, created or joined and is no longer
// specified it removes or releases; what others set (the boot's ip= or DHCP) it leaves. A spec
// that cannot be set yet (its link is missing) is tried again on the next change.
type SpecController struct {
	addresses map[string]network.AddressSpecSpec // added, by ID
	routes    map[string]network.RouteSpecSpec
	logical   map[string]bool                  // links created (bonds, bridges, VLANs), by name
	members   map[string]string                // links joined to a bond or a bridge: the master's name
	wireguard map[string]network.WireguardSpec // WireGuard links configured, as they were

	// LoadModule loads a kernel module a logical link needs (bonding, 8021q, bridge); nil: none
	// is loaded (built in, or there already).
	LoadModule func(name string) error
}

// Name implements controller.Controller.
func (ctrl *SpecController) Name() string { return "network.SpecController" }

// Inputs implements controller.Controller.
func (ctrl *SpecController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: network.NamespaceName, Type: network.LinkSpecType, Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.AddressSpecType, Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.RouteSpecType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *SpecController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *SpecController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	ctrl.addresses, ctrl.routes = map[string]network.AddressSpecSpec{}, map[string]network.RouteSpecSpec{}
	ctrl.logical, ctrl.members = map[string]bool{}, map[string]string{}
	ctrl.wireguard = map[string]network.WireguardSpec{}

	// Links come and go (a NIC's driver loads late): a change of links sets the specs again.
	return watchNetlink(ctx, r, unix.RTMGRP_LINK, func(conn *rtnetlink.Conn) error {
		return ctrl.apply(ctx, r, conn, log)
	})
}

func (ctrl *SpecController) apply(ctx context.Context, r controller.Runtime, conn *rtnetlink.Conn, log *zap.Logger) error {
	index, masters, err := listLinks(conn)
	if err != nil {
		return err
	}

	linkSpecs, err := safe.ReaderListAll[*network.LinkSpec](ctx, r)
	if err != nil {
		return err
	}

	// Logical links first: bonds, bridges and VLANs are made, those no longer specified removed.
	wantLogical, changed := map[string]bool{}, false

	for spec := range linkSpecs.All() {
		s := spec.TypedSpec()
		if !s.Logical {
			continue
		}

		wantLogical[s.Name] = true

		if _, ok := index[s.Name]; ok {
			continue
		}

		if module := netlink.Modules[s.Kind]; module != "" && ctrl.LoadModule != nil {
			if err = ctrl.LoadModule(module); err != nil {
				log.Warn("loading the module of a link", zap.String("link", s.Name), zap.String("module", module), zap.Error(err))
			}
		}

		if err = netlink.CreateLogical(conn, *s, index); err != nil {
			log.Warn("creating link", zap.String("link", s.Name), zap.Error(err))

			continue
		}

		ctrl.logical[s.Name], changed = true, true
	}

	for name := range ctrl.logical {
		if wantLogical[name] {
			continue
		}

		if idx, ok := index[name]; ok {
			if err = conn.Link.Delete(idx); err != nil {
				log.Warn("removing link", zap.String("link", name), zap.Error(err))

				continue
			}

			changed = true
		}

		delete(ctrl.logical, name)
	}

	if changed {
		if index, masters, err = listLinks(conn); err != nil {
			return err
		}
	}

	// WireGuard links get their keys and peers once made, and again when the spec changes.
	for spec := range linkSpecs.All() {
		s := spec.TypedSpec()
		if s.Kind != "wireguard" || index[s.Name] == 0 {
			continue
		}

		if done, ok := ctrl.wireguard[s.Name]; ok && sameWireguard(done, s.Wireguard) {
			continue
		}

		if err = configureWireguard(s.Name, s.Wireguard); err != nil {
			log.Warn("configuring WireGuard", zap.String("link", s.Name), zap.Error(err))

			continue
		}

		ctrl.wireguard[s.Name] = s.Wireguard
	}

	for name := range ctrl.wireguard {
		if !wantLogical[name] {
			delete(ctrl.wireguard, name)
		}
	}

	ctrl.releaseMembers(conn, linkSpecs, index, masters, log)

	for spec := range linkSpecs.All() {
		s := spec.TypedSpec()

		idx, ok := index[s.Name]
		if !ok {
			log.Warn("no such link yet", zap.String("link", s.Name))

			continue
		}

		for _, m := range []string{s.BondSlave.MasterName, s.BridgeSlave.MasterName} {
			if master, ok := index[m]; ok && m != "" && masters[s.Name] != master {
				if err = netlink.Enslave(conn, idx, master); err != nil {
					log.Warn("adding a member", zap.String("link", s.Name), zap.String("master", m), zap.Error(err))

					continue
				}

				ctrl.members[s.Name] = m
			}
		}

		msg := &rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Change: unix.IFF_UP}
		if s.Up {
			msg.Flags = unix.IFF_UP
		}

		if s.MTU != 0 {
			msg.Attributes = &rtnetlink.LinkAttributes{MTU: s.MTU}
		}

		if err = conn.Link.Set(msg); err != nil {
			log.Warn("setting link", zap.String("link", s.Name), zap.Error(err))
		}
	}

	addrSpecs, err := safe.ReaderListAll[*network.AddressSpec](ctx, r)
	if err != nil {
		return err
	}

	wantAddrs := map[string]network.AddressSpecSpec{}
	for spec := range addrSpecs.All() {
		wantAddrs[spec.Metadata().ID()] = *spec.TypedSpec()
	}

	for id, s := range ctrl.addresses {
		if _, ok := wantAddrs[id]; !ok {
			if _, ok = index[s.LinkName]; !ok {
				delete(ctrl.addresses, id) // it went with its link

				continue
			}

			if err = conn.Address.Delete(addressMessage(s, index[s.LinkName])); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				log.Warn("removing address", zap.String("address", id), zap.Error(err))
			}

			delete(ctrl.addresses, id)
		}
	}

	for id, s := range wantAddrs {
		idx, ok := index[s.LinkName]
		if !ok {
			continue
		}

		if err = conn.Address.New(addressMessage(s, idx)); err != nil && !errors.Is(err, unix.EEXIST) {
			log.Warn("adding address", zap.String("address", id), zap.Error(err))

			continue
		}

		ctrl.addresses[id] = s
	}

	routeSpecs, err := safe.ReaderListAll[*network.RouteSpec](ctx, r)
	if err != nil {
		return err
	}

	wantRoutes := map[string]network.RouteSpecSpec{}
	for spec := range routeSpecs.All() {
		wantRoutes[spec.Metadata().ID()] = *spec.TypedSpec()
	}

	for id, s := range ctrl.routes {
		if _, ok := wantRoutes[id]; !ok {
			if _, ok = index[s.OutLinkName]; !ok {
				delete(ctrl.routes, id) // it went with its link

				continue
			}

			if err = conn.Route.Delete(routeMessage(s, index[s.OutLinkName])); err != nil && !errors.Is(err, unix.ESRCH) {
				log.Warn("removing route", zap.String("route", id), zap.Error(err))
			}

			delete(ctrl.routes, id)
		}
	}

	for id, s := range wantRoutes {
		idx, ok := index[s.OutLinkName]
		if !ok {
			continue
		}

		if err = conn.Route.Add(routeMessage(s, idx)); err != nil && !errors.Is(err, unix.EEXIST) {
			log.Warn("adding route", zap.String("route", id), zap.Error(err))

			continue
		}

		ctrl.routes[id] = s
	}

	return nil
}

// releaseMembers takes out of their bond or bridge the links it joined there that the specs no
// longer put there.
func (ctrl *SpecController) releaseMembers(conn *rtnetlink.Conn, specs safe.List[*network.LinkSpec], index, masters map[string]uint32, log *zap.Logger) {
	want := map[string]string{}

	for spec := range specs.All() {
		s := spec.TypedSpec()
		want[s.Name] = cmp.Or(s.BondSlave.MasterName, s.BridgeSlave.MasterName)
	}

	for link, master := range ctrl.members {
		if want[link] == master {
			continue
		}

		delete(ctrl.members, link)

		idx, ok := index[link]
		if !ok || masters[link] == 0 || masters[link] != index[master] {
			continue // gone, or no longer there
		}

		none := uint32(0)
		if err := conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Attributes: &rtnetlink.LinkAttributes{Master: &none}}); err != nil {
			log.Warn("releasing a member", zap.String("link", link), zap.String("master", master), zap.Error(err))
		}
	}
}

// listLinks indexes the kernel's links by name, with each one's master (0: none).
func listLinks(conn *rtnetlink.Conn) (index, masters map[string]uint32, err error) {
	links, err := conn.Link.List()
	if err != nil {
		return nil, nil, fmt.Errorf("listing links: %w", err)
	}

	index, masters = map[string]uint32{}, map[string]uint32{}

	for _, l := range links {
		if l.Attributes == nil {
			continue
		}

		index[l.Attributes.Name] = l.Index

		if l.Attributes.Master != nil {
			masters[l.Attributes.Name] = *l.Attributes.Master
		}
	}

	return index, masters, nil
}

func addressMessage(s network.AddressSpecSpec, idx uint32) *rtnetlink.AddressMessage {
	ip := s.Address.Addr().AsSlice()
	attrs := &rtnetlink.AddressAttributes{Address: ip, Local: ip}
	family := uint8(unix.AF_INET6)

	if s.Address.Addr().Is4() {
		family = unix.AF_INET
		mask := net.CIDRMask(s.Address.Bits(), 32)
		brd := make(net.IP, 4)

		for i := range brd {
			brd[i] = ip[i] | ^mask[i]
		}

		attrs.Broadcast = brd
	}

	return &rtnetlink.AddressMessage{Family: family, PrefixLength: uint8(s.Address.Bits()), Scope: uint8(s.Scope), Index: idx, Attributes: attrs}
}

func routeMessage(s network.RouteSpecSpec, idx uint32) *rtnetlink.RouteMessage {
	family := uint8(unix.AF_INET6)
	if s.Family == nethelpers.FamilyInet4 {
		family = unix.AF_INET
	}

	attrs := rtnetlink.RouteAttributes{OutIface: idx, Priority: s.Priority}
	if s.Destination.IsValid() && s.Destination.Bits() > 0 {
		attrs.Dst = s.Destination.Addr().AsSlice()
	}

	if s.Gateway.IsValid() {
		attrs.Gateway = s.Gateway.AsSlice()
	}

	if s.Source.IsValid() {
		attrs.Src = s.Source.AsSlice()
	}

	dstLen := uint8(0)
	if s.Destination.IsValid() {
		dstLen = uint8(s.Destination.Bits())
	}

	return &rtnetlink.RouteMessage{
		Family: family, DstLength: dstLen, Table: uint8(s.Table), Protocol: uint8(s.Protocol), Scope: uint8(s.Scope), Type: uint8(s.Type),
		Attributes: attrs,
	}
}
