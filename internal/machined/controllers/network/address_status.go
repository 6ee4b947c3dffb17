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

// AddressStatusController reports every address of the node's namespace as an AddressStatus
// (ID: link/prefix, as upstream), from rtnetlink.
type AddressStatusController struct{}

// Name implements controller.Controller.
func (ctrl *AddressStatusController) Name() string { return "network.AddressStatusController" }

// Inputs implements controller.Controller.
func (ctrl *AddressStatusController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *AddressStatusController) Outputs() []controller.Output {
	// Shared: the discovery service's view of the node's public address is one too (namespace
	// cluster, as upstream's).
	return []controller.Output{{Type: network.AddressStatusType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *AddressStatusController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	// Link changes too: a renamed link renames its addresses' IDs.
	groups := uint32(unix.RTMGRP_LINK | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR)

	return watchNetlink(ctx, r, groups, func(conn *rtnetlink.Conn) error {
		names, err := linkNames(conn)
		if err != nil {
			return err
		}

		addrs, err := conn.Address.List()
		if err != nil {
			return fmt.Errorf("listing addresses: %w", err)
		}

		r.StartTrackingOutputs()

		for _, a := range addrs {
			if a.Attributes == nil {
				continue
			}

			ip := addr(a.Attributes.Address)
			if !ip.IsValid() {
				continue
			}

			prefix := netip.PrefixFrom(ip, int(a.PrefixLength))
			link := names[a.Index]

			if err = safe.WriterModify(ctx, r, network.NewAddressStatus(network.NamespaceName, network.AddressID(link, prefix)), func(res *network.AddressStatus) error {
				flags := a.Attributes.Flags
				if flags == 0 {
					flags = uint32(a.Flags) // kernels before IFA_FLAGS
				}

				*res.TypedSpec() = network.AddressStatusSpec{
					Address:   prefix,
					Local:     addr(a.Attributes.Local),
					Broadcast: addr(a.Attributes.Broadcast),
					Anycast:   addr(a.Attributes.Anycast),
					Multicast: addr(a.Attributes.Multicast),
					LinkIndex: a.Index,
					LinkName:  link,
					Family:    nethelpers.Family(a.Family),
					Scope:     nethelpers.Scope(a.Scope),
					Flags:     nethelpers.AddressFlags(flags),
					Priority:  a.Attributes.Priority,
				}

				return nil
			}); err != nil {
				return fmt.Errorf("writing address status %s: %w", prefix, err)
			}
		}

		return safe.CleanupOutputs[*network.AddressStatus](ctx, r)
	})
}
