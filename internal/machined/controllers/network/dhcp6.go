package network

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/dhcp6"
)

// DHCP6Controller keeps the DHCPv6 addresses of a metal node's links: those the boot leased over
// DHCPv6 and those the config asks for (`dhcpOptions.ipv6: true`, the DHCP6 operator specs of
// ConfigSpecController, with their duidv6). It renews each lease at T1 with its server (RENEW),
// asks any server from T2 (REBIND), and publishes each as a /128 address spec and a resolver spec of its name
// servers (the operator layer, as upstream's DHCPv6 operator). The network's prefix and default
// route come from its router advertisements, which the kernel applies. A lease that runs out
// takes its specs away. A link the config ignores it leaves alone, as DHCP4Controller does.
type DHCP6Controller struct {
	// Links are the links the boot leased an IPv6 address on.
	Links []string
	// Retry is the longest wait between failed attempts (default 30 s).
	Retry time.Duration
}

// Name implements controller.Controller.
func (ctrl *DHCP6Controller) Name() string { return "network.DHCP6Controller" }

// Inputs implements controller.Controller.
func (ctrl *DHCP6Controller) Inputs() []controller.Input {
	return append(ignoredInputs(), controller.Input{Namespace: network.NamespaceName, Type: network.OperatorSpecType, Kind: controller.InputWeak})
}

// Outputs implements controller.Controller.
func (ctrl *DHCP6Controller) Outputs() []controller.Output {
	return []controller.Output{
		{Type: network.AddressSpecType, Kind: controller.OutputShared},
		{Type: network.ResolverSpecType, Kind: controller.OutputShared},
	}
}

// Run implements controller.Controller.
func (ctrl *DHCP6Controller) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	updates := make(chan dhcp6.Lease)
	keepers := linkKeepers[string]{} // by the DUID asked for: another one is another client
	leases := map[string]dhcp6.Lease{}
	released := map[string]bool{} // the boot links the config ignores whose lease is gone

	defer keepers.stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case l := <-updates:
			if _, kept := keepers[l.Link]; kept {
				leases[l.Link] = l
			}
		case <-r.EventCh():
			want, ignored, err := ctrl.links(ctx, r)
			if err != nil {
				return err
			}

			for _, link := range keepers.update(ctx, want, func(ctx context.Context, link, duid string) {
				linkLog := log.With(zap.String("link", link))

				var id dhcpv6.DUID

				if duid != "" {
					var err error
					if id, err = dhcp6.ParseDUID(duid); err != nil {
						linkLog.Error("DHCPv6: the link's DUID (its MAC's) is used instead", zap.Error(err))
					}
				}

				ctrl.keep(ctx, link, id, updates, linkLog)
			}) {
				delete(leases, link)
			}

			if err = releaseIgnored(ctrl.Links, ignored, released, true, log); err != nil {
				return err
			}
		}

		if err := ctrl.publish(ctx, r, leases); err != nil {
			return err
		}
	}
}

// links are the boot's and the DHCP6 operator specs' links, with the DUID to use ("": the
// link's MAC's), less those the config ignores (which it returns too).
func (ctrl *DHCP6Controller) links(ctx context.Context, r controller.Reader) (map[string]string, map[string]bool, error) {
	ignored, err := ignoredLinks(ctx, r)
	if err != nil {
		return nil, nil, err
	}

	want := map[string]string{}

	for _, link := range ctrl.Links {
		if !ignored[link] {
			want[link] = ""
		}
	}

	specs, err := safe.ReaderListAll[*network.OperatorSpec](ctx, r)
	if err != nil {
		return nil, nil, fmt.Errorf("listing operator specs: %w", err)
	}

	for spec := range specs.All() {
		if s := spec.TypedSpec(); s.Operator == network.OperatorDHCP6 && !ignored[s.LinkName] {
			want[s.LinkName] = s.DHCP6.DUID
		}
	}

	return want, ignored, nil
}

func (ctrl *DHCP6Controller) publish(ctx context.Context, r controller.Runtime, leases map[string]dhcp6.Lease) error {
	r.StartTrackingOutputs()

	for link, l := range leases {
		if !l.Address.IsValid() {
			continue
		}

		addr := netip.PrefixFrom(l.Address, 128)

		if err := safe.WriterModify(ctx, r, network.NewAddressSpec(network.NamespaceName, network.LayeredID(network.ConfigOperator, network.AddressID(link, addr))),
			func(res *network.AddressSpec) error {
				*res.TypedSpec() = network.AddressSpecSpec{
					Address: addr, LinkName: link, Family: nethelpers.FamilyInet6, Scope: nethelpers.ScopeGlobal,
					Flags: nethelpers.AddressFlags(nethelpers.AddressPermanent), ConfigLayer: network.ConfigOperator,
				}

				return nil
			}); err != nil {
			return err
		}

		if len(l.DNS) > 0 {
			if err := safe.WriterModify(ctx, r, network.NewResolverSpec(network.NamespaceName, network.LayeredID(network.ConfigOperator, "dhcp6/"+link)),
				func(res *network.ResolverSpec) error {
					*res.TypedSpec() = network.ResolverSpecSpec{DNSServers: l.DNS, ConfigLayer: network.ConfigOperator}

					return nil
				}); err != nil {
				return err
			}
		}
	}

	return r.CleanupOutputs(ctx,
		resource.NewMetadata(network.NamespaceName, network.AddressSpecType, "", resource.VersionUndefined),
		resource.NewMetadata(network.NamespaceName, network.ResolverSpecType, "", resource.VersionUndefined),
	)
}

// keep holds a lease on link until ctx ends, sending each change (a zero address: none).
func (ctrl *DHCP6Controller) keep(ctx context.Context, link string, duid dhcpv6.DUID, updates chan<- dhcp6.Lease, log *zap.Logger) {
	retry := ctrl.Retry
	if retry == 0 {
		retry = 30 * time.Second
	}

	send := func(l dhcp6.Lease) bool {
		select {
		case updates <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}

	var (
		lease dhcp6.Lease
		wait  = time.Second // before the next try without a lease: doubles up to retry
	)

	for {
		if !lease.Address.IsValid() {
			attemptCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			l, err := dhcp6.Acquire(attemptCtx, link, duid)

			cancel()

			if err != nil {
				log.Warn("DHCPv6: no lease, trying again", zap.Error(err), zap.Duration("in", wait))

				if !sleep(ctx, wait) {
					return
				}

				wait = min(wait*2, retry)

				continue
			}

			lease, wait = l, time.Second
			log.Info("DHCPv6: leased", zap.Stringer("address", l.Address), zap.Duration("for", l.Valid))

			if !send(lease) {
				return
			}
		}

		if !sleep(ctx, time.Until(lease.Renew())) {
			return
		}

		// Renew with the server that gave the lease, then from T2 any server, until it ends.
		for {
			attemptCtx, cancel := context.WithDeadline(ctx, lease.End())
			l, err := dhcp6.Renew(attemptCtx, lease, !time.Now().Before(lease.Rebind()))

			cancel()

			if err == nil {
				log.Info("DHCPv6: renewed", zap.Stringer("address", l.Address), zap.Duration("for", l.Valid))

				lease = l
				if !send(lease) {
					return
				}

				break
			}

			if !time.Now().Before(lease.End()) {
				log.Warn("DHCPv6: the lease is lost", zap.Error(err))

				lease = dhcp6.Lease{Link: link}
				if !send(lease) {
					return
				}

				break
			}

			log.Warn("DHCPv6: renewal failed, trying again", zap.Error(err))

			if !sleep(ctx, min(retry, max(time.Until(lease.End())/2, time.Second))) {
				return
			}
		}
	}
}
