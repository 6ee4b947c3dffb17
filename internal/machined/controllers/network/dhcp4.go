package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/dhcp4"
)

// DHCP4Controller keeps the DHCPv4 leases of a metal node's links: those the boot leased (it
// asks again on each: the boot's lease is not handed over) and those the config runs DHCP on
// (the DHCP4 operator specs of ConfigSpecController, `dhcp: true` on an interface or a VLAN),
// starting and stopping as the config changes; a link the config ignores (`ignore: true`) it
// leaves alone, taking away the boot's lease on it. It renews each lease at half its
// time (RFC 2131's T1), asks any server from 7/8 of it (T2), and publishes each lease as an
// address spec, a default route spec through its router and a resolver spec of its name
// servers (the operator layer, as upstream's DHCP operator), which SpecController sets and
// ResolverController uses when the config names no resolvers. A lease that runs out takes
// them away.
type DHCP4Controller struct {
	// Links are the links the boot ran DHCP on; none with ip=.
	Links []string
	// Retry is the wait between failed attempts (default 30 s).
	Retry time.Duration
}

// Name implements controller.Controller.
func (ctrl *DHCP4Controller) Name() string { return "network.DHCP4Controller" }

// Inputs implements controller.Controller.
func (ctrl *DHCP4Controller) Inputs() []controller.Input {
	return append(ignoredInputs(), controller.Input{Namespace: network.NamespaceName, Type: network.OperatorSpecType, Kind: controller.InputWeak})
}

// Outputs implements controller.Controller.
func (ctrl *DHCP4Controller) Outputs() []controller.Output {
	return []controller.Output{
		{Type: network.AddressSpecType, Kind: controller.OutputShared},
		{Type: network.RouteSpecType, Kind: controller.OutputShared},
		{Type: network.ResolverSpecType, Kind: controller.OutputShared}, // with DHCP6Controller
	}
}

// dhcpLease is a link's current lease; nil ack: none.
type dhcpLease struct {
	link string
	ack  *dhcpv4.DHCPv4
}

// Run implements controller.Controller.
func (ctrl *DHCP4Controller) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	updates := make(chan dhcpLease)
	keepers := linkKeepers[struct{}]{}
	leases := map[string]*dhcpv4.DHCPv4{}
	metrics := map[string]uint32{} // the default route's, by link: a new one keeps the lease
	released := map[string]bool{}  // the boot links the config ignores whose lease is gone

	defer keepers.stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-updates:
			if _, kept := keepers[u.link]; kept {
				leases[u.link] = u.ack
			}
		case <-r.EventCh():
			want, ignored, err := ctrl.links(ctx, r)
			if err != nil {
				return err
			}

			links := map[string]struct{}{}
			for link, metric := range want {
				links[link], metrics[link] = struct{}{}, metric
			}

			for _, link := range keepers.update(ctx, links, func(ctx context.Context, link string, _ struct{}) {
				ctrl.keep(ctx, link, updates, log.With(zap.String("link", link)))
			}) {
				delete(leases, link)
			}

			if err = releaseIgnored(ctrl.Links, ignored, released, false, log); err != nil {
				return err
			}
		}

		if err := ctrl.publish(ctx, r, leases, metrics); err != nil {
			return err
		}
	}
}

// links are the links to keep a lease on, with their default route's metric: the boot's
// (upstream's 1024, as the initramfs set it) and the DHCP4 operator specs', less those the
// config ignores (which it returns too).
func (ctrl *DHCP4Controller) links(ctx context.Context, r controller.Reader) (map[string]uint32, map[string]bool, error) {
	ignored, err := ignoredLinks(ctx, r)
	if err != nil {
		return nil, nil, err
	}

	want := map[string]uint32{}

	for _, link := range ctrl.Links {
		if !ignored[link] {
			want[link] = network.DefaultRouteMetric
		}
	}

	specs, err := safe.ReaderListAll[*network.OperatorSpec](ctx, r)
	if err != nil {
		return nil, nil, fmt.Errorf("listing operator specs: %w", err)
	}

	for spec := range specs.All() {
		if s := spec.TypedSpec(); s.Operator == network.OperatorDHCP4 && !ignored[s.LinkName] {
			if _, boot := want[s.LinkName]; !boot {
				want[s.LinkName] = s.DHCP4.RouteMetric
			}
		}
	}

	return want, ignored, nil
}

func (ctrl *DHCP4Controller) publish(ctx context.Context, r controller.Runtime, leases map[string]*dhcpv4.DHCPv4, metrics map[string]uint32) error {
	r.StartTrackingOutputs()

	for link, ack := range leases {
		if ack == nil {
			continue
		}

		addr, ok := dhcp4.Address(ack)
		if !ok {
			continue
		}

		if err := safe.WriterModify(ctx, r, network.NewAddressSpec(network.NamespaceName, network.LayeredID(network.ConfigOperator, network.AddressID(link, addr))),
			func(res *network.AddressSpec) error {
				*res.TypedSpec() = network.AddressSpecSpec{
					Address: addr, LinkName: link, Family: nethelpers.FamilyInet4, Scope: nethelpers.ScopeGlobal,
					Flags: nethelpers.AddressFlags(nethelpers.AddressPermanent), ConfigLayer: network.ConfigOperator,
				}

				return nil
			}); err != nil {
			return err
		}

		if gw, ok := dhcp4.Gateway(ack); ok {
			// A boot link's as the boot's route (metric 0), so that the two are one.
			spec := network.RouteSpecSpec{
				Family: nethelpers.FamilyInet4, Gateway: gw, OutLinkName: link, Table: nethelpers.TableMain, Priority: metrics[link],
				Type: nethelpers.TypeUnicast, Protocol: nethelpers.ProtocolStatic, ConfigLayer: network.ConfigOperator,
			}
			spec.Normalize()

			id := network.LayeredID(network.ConfigOperator, network.RouteID(spec.Table, spec.Family, spec.Destination, spec.Gateway, spec.Priority, link))
			if err := safe.WriterModify(ctx, r, network.NewRouteSpec(network.NamespaceName, id), func(res *network.RouteSpec) error {
				*res.TypedSpec() = spec

				return nil
			}); err != nil {
				return err
			}
		}

		if dns := dhcp4.DNS(ack); len(dns) > 0 {
			if err := safe.WriterModify(ctx, r, network.NewResolverSpec(network.NamespaceName, network.LayeredID(network.ConfigOperator, "dhcp4/"+link)),
				func(res *network.ResolverSpec) error {
					*res.TypedSpec() = network.ResolverSpecSpec{DNSServers: dns, ConfigLayer: network.ConfigOperator}

					return nil
				}); err != nil {
				return err
			}
		}
	}

	return r.CleanupOutputs(ctx,
		resource.NewMetadata(network.NamespaceName, network.AddressSpecType, "", resource.VersionUndefined),
		resource.NewMetadata(network.NamespaceName, network.RouteSpecType, "", resource.VersionUndefined),
		resource.NewMetadata(network.NamespaceName, network.ResolverSpecType, "", resource.VersionUndefined),
	)
}

// keep holds a lease on link until ctx ends, sending each change.
func (ctrl *DHCP4Controller) keep(ctx context.Context, link string, updates chan<- dhcpLease, log *zap.Logger) {
	retry := ctrl.Retry
	if retry == 0 {
		retry = 30 * time.Second
	}

	var (
		lease *nclient4.Lease
		wait  = time.Second // before the next try without a lease: doubles up to retry
	)

	send := func(l *nclient4.Lease) bool {
		u := dhcpLease{link: link}
		if l != nil {
			u.ack = l.ACK
		}

		select {
		case updates <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}

	for {
		if lease == nil {
			// A link the config asks for may not be there yet (a VLAN, a bond): try soon.
			l, err := exchange(ctx, link, nil)
			if err != nil {
				log.Warn("DHCP: no lease, trying again", zap.Error(err), zap.Duration("in", wait))

				if !sleep(ctx, wait) {
					return
				}

				wait = min(wait*2, retry)

				continue
			}

			lease, wait = l, time.Second
			log.Info("DHCP: leased", zap.Stringer("address", l.ACK.YourIPAddr), zap.Duration("for", leaseTime(l)))

			if !send(lease) {
				return
			}
		}

		t1, t2, end := dhcp4.Times(lease)

		if !sleep(ctx, time.Until(t1)) {
			return
		}

		// Renew with the server that gave the lease, then from T2 ask any server, until it
		// ends.
		for {
			var (
				l   *nclient4.Lease
				err error
			)

			// No attempt runs past the lease's end, when its address must go.
			attemptCtx, cancel := context.WithDeadline(ctx, end)

			if time.Now().Before(t2) {
				l, err = exchange(attemptCtx, link, lease)
			} else {
				l, err = exchange(attemptCtx, link, nil)
			}

			cancel()

			if err == nil {
				log.Info("DHCP: renewed", zap.Stringer("address", l.ACK.YourIPAddr), zap.Duration("for", leaseTime(l)))

				// A new address replaces the old one's specs.
				lease = l
				if !send(lease) {
					return
				}

				break
			}

			var nak *nclient4.ErrNak
			if errors.As(err, &nak) || !time.Now().Before(end) {
				log.Warn("DHCP: the lease is lost", zap.Error(err))

				lease = nil

				if !send(nil) {
					return
				}

				break
			}

			log.Warn("DHCP: renewal failed, trying again", zap.Error(err))

			if !sleep(ctx, min(retry, max(time.Until(end)/2, time.Second))) {
				return
			}
		}
	}
}

// leaseTime is how long the lease lasts (an hour when the server does not say).
func leaseTime(l *nclient4.Lease) time.Duration { return dhcp4.Duration(l, time.Hour) }

// exchange renews lease with its server, or asks for a new one (DISCOVER to ACK) when lease is
// nil, asking for the link's current address.
func exchange(ctx context.Context, link string, lease *nclient4.Lease) (*nclient4.Lease, error) {
	client, err := dhcp4.Dial(link)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	if lease != nil {
		return client.Renew(ctx, lease)
	}

	return client.Request(ctx, currentAddress(link))
}

// currentAddress is link's first IPv4 address (the boot's lease), asked for again.
func currentAddress(link string) net.IP {
	iface, err := net.InterfaceByName(link)
	if err != nil {
		return nil
	}

	addrs, err := iface.Addrs()
	if err != nil {
		return nil
	}

	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
			return ipn.IP
		}
	}

	return nil
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()

	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
