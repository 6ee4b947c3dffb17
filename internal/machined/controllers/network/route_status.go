package network

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// RouteStatusController reports every route of the node's namespace, all tables, as a
// RouteStatus (ID as upstream's network.RouteID), from rtnetlink.
type RouteStatusController struct{}

// Name implements controller.Controller.
func (ctrl *RouteStatusController) Name() string { return "network.RouteStatusController" }

// Inputs implements controller.Controller.
func (ctrl *RouteStatusController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *RouteStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.RouteStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *RouteStatusController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	groups := uint32(unix.RTMGRP_LINK | unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV6_ROUTE)

	return watchNetlink(ctx, r, groups, func(conn *rtnetlink.Conn) error {
		names, err := linkNames(conn)
		if err != nil {
			return err
		}

		routes, err := conn.Route.List()
		if err != nil {
			return fmt.Errorf("listing routes: %w", err)
		}

		r.StartTrackingOutputs()

		for _, rt := range routes {
			spec := routeStatus(rt, names)
			id := network.RouteID(spec.Table, spec.Family, spec.Destination, spec.Gateway, spec.Priority, spec.OutLinkName)

			if err = safe.WriterModify(ctx, r, network.NewRouteStatus(network.NamespaceName, id), func(res *network.RouteStatus) error {
				*res.TypedSpec() = spec

				return nil
			}); err != nil {
				return fmt.Errorf("writing route status %s: %w", id, err)
			}
		}

		return safe.CleanupOutputs[*network.RouteStatus](ctx, r)
	})
}

func routeStatus(rt rtnetlink.RouteMessage, names map[uint32]string) network.RouteStatusSpec {
	a := rt.Attributes

	table := a.Table
	if table == 0 {
		table = uint32(rt.Table) // RTA_TABLE is absent on old kernels
	}

	spec := network.RouteStatusSpec{
		Family:       nethelpers.Family(rt.Family),
		Source:       addr(a.Src),
		Gateway:      addr(a.Gateway),
		OutLinkIndex: a.OutIface,
		OutLinkName:  names[a.OutIface],
		Table:        nethelpers.RoutingTable(table),
		Priority:     a.Priority,
		Scope:        nethelpers.Scope(rt.Scope),
		Type:         nethelpers.RouteType(rt.Type),
		Flags:        nethelpers.RouteFlags(rt.Flags),
		Protocol:     nethelpers.RouteProtocol(rt.Protocol),
	}

	if dst := addr(a.Dst); dst.IsValid() {
		spec.Destination = netip.PrefixFrom(dst, int(rt.DstLength))
	}

	if a.Metrics != nil {
		spec.MTU = a.Metrics.MTU
	}

	return spec
}
