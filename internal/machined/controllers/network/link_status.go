package network

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// LinkStatusController reports every network link of the node's namespace as a LinkStatus
// (ID: the link name), from rtnetlink.
type LinkStatusController struct{}

// Name implements controller.Controller.
func (ctrl *LinkStatusController) Name() string { return "network.LinkStatusController" }

// Inputs implements controller.Controller.
func (ctrl *LinkStatusController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *LinkStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.LinkStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *LinkStatusController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	return watchNetlink(ctx, r, unix.RTMGRP_LINK, func(conn *rtnetlink.Conn) error {
		links, err := conn.Link.List()
		if err != nil {
			return fmt.Errorf("listing links: %w", err)
		}

		r.StartTrackingOutputs()

		for _, l := range links {
			if l.Attributes == nil || l.Attributes.Name == "" {
				continue
			}

			hw := readLinkHardware(SysClassNet, l.Attributes.Name)

			if err = safe.WriterModify(ctx, r, network.NewLinkStatus(network.NamespaceName, l.Attributes.Name), func(res *network.LinkStatus) error {
				fillLinkStatus(res.TypedSpec(), l)
				res.TypedSpec().Driver, res.TypedSpec().BusPath, res.TypedSpec().PCIID = hw.driver, hw.busPath, hw.pciID
				res.TypedSpec().PermanentAddr = nethelpers.HardwareAddr(permanentAddr(l.Attributes.Name))

				return nil
			}); err != nil {
				return fmt.Errorf("writing link status %s: %w", l.Attributes.Name, err)
			}
		}

		return safe.CleanupOutputs[*network.LinkStatus](ctx, r)
	})
}

func fillLinkStatus(spec *network.LinkStatusSpec, l rtnetlink.LinkMessage) {
	a := l.Attributes

	*spec = network.LinkStatusSpec{
		Index:            l.Index,
		Type:             nethelpers.LinkType(l.Type),
		Flags:            nethelpers.LinkFlags(l.Flags),
		HardwareAddr:     nethelpers.HardwareAddr(a.Address),
		BroadcastAddr:    nethelpers.HardwareAddr(a.Broadcast),
		MTU:              a.MTU,
		QueueDisc:        a.QueueDisc,
		OperationalState: nethelpers.OperationalState(a.OperationalState),
		AltNames:         a.AltNames,
		// Carrier is the link's physical state; upstream reads it from ethtool, which
		// virtual links do not answer.
		LinkState: a.Carrier != nil && *a.Carrier == 1,
	}

	if a.Alias != nil {
		spec.Alias = *a.Alias
	}

	if a.Master != nil {
		spec.MasterIndex = *a.Master
	}

	if a.Info != nil {
		spec.Kind, spec.SlaveKind = a.Info.Kind, a.Info.SlaveKind
	}
}
