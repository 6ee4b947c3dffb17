package kubespan

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"go.uber.org/zap"
)

// PeerSpecController makes a KubeSpan peer (PeerSpec, by public key) of every other affiliate
// that runs KubeSpan: its KubeSpan address and its node addresses are routed to it (with the
// networks it advertises when advertiseKubernetesNetworks is on), through its endpoints.
type PeerSpecController struct{}

// Name implements controller.Controller.
func (ctrl *PeerSpecController) Name() string { return "kubespan.PeerSpecController" }

// Inputs implements controller.Controller.
func (ctrl *PeerSpecController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: kubespan.ConfigType, ID: optional.Some(kubespan.ConfigID), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.IdentityType, ID: optional.Some(kubespan.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.AffiliateType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *PeerSpecController) Outputs() []controller.Output {
	return []controller.Output{{Type: kubespan.PeerSpecType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *PeerSpecController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		peers, err := ctrl.peers(ctx, r)
		if err != nil {
			return err
		}

		r.StartTrackingOutputs()

		for key, p := range peers {
			if err = safe.WriterModify(ctx, r, kubespan.NewPeerSpec(kubespan.NamespaceName, key), func(res *kubespan.PeerSpec) error {
				*res.TypedSpec() = p

				return nil
			}); err != nil {
				return fmt.Errorf("writing KubeSpan peer %s: %w", p.Label, err)
			}
		}

		if err = safe.CleanupOutputs[*kubespan.PeerSpec](ctx, r); err != nil {
			return err
		}
	}
}

func (ctrl *PeerSpecController) peers(ctx context.Context, r controller.Reader) (map[string]kubespan.PeerSpecSpec, error) {
	cfg, err := safe.ReaderGetByID[*kubespan.Config](ctx, r, kubespan.ConfigID)
	if state.IsNotFoundError(err) {
		return nil, nil
	}

	if err != nil {
		return nil, err
	}

	self, err := safe.ReaderGetByID[*kubespan.Identity](ctx, r, kubespan.LocalIdentity)
	if state.IsNotFoundError(err) {
		return nil, nil
	}

	if err != nil {
		return nil, err
	}

	affiliates, err := safe.ReaderListAll[*cluster.Affiliate](ctx, r)
	if err != nil {
		return nil, err
	}

	peers := map[string]kubespan.PeerSpecSpec{}

	for a := range affiliates.All() {
		if p, ok := PeerOf(a.TypedSpec(), self.TypedSpec(), cfg.TypedSpec()); ok {
			peers[a.TypedSpec().KubeSpan.PublicKey] = p
		}
	}

	return peers, nil
}

// PeerOf is the peer an affiliate makes for this node (self); false for this node itself and
// for an affiliate without KubeSpan.
func PeerOf(a *cluster.AffiliateSpec, self *kubespan.IdentitySpec, cfg *kubespan.ConfigSpec) (kubespan.PeerSpecSpec, bool) {
	ks := a.KubeSpan
	if ks.PublicKey == "" || ks.PublicKey == self.PublicKey || !ks.Address.IsValid() {
		return kubespan.PeerSpecSpec{}, false
	}

	p := kubespan.PeerSpecSpec{Address: ks.Address, Label: a.Hostname, AllowedIPs: []netip.Prefix{netip.PrefixFrom(ks.Address, ks.Address.BitLen())}}

	for _, addr := range a.Addresses {
		if !self.Subnet.Contains(addr) && !addr.IsLinkLocalUnicast() {
			p.AllowedIPs = append(p.AllowedIPs, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}

	if cfg.AdvertiseKubernetesNetworks {
		p.AllowedIPs = append(p.AllowedIPs, ks.AdditionalAddresses...)
	}

	for _, ep := range ks.Endpoints {
		if !self.Subnet.Contains(ep.Addr()) && endpointAllowed(ep.Addr(), cfg.EndpointFilters) {
			p.Endpoints = append(p.Endpoints, ep)
		}
	}

	slices.SortFunc(p.AllowedIPs, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	p.AllowedIPs = slices.Compact(p.AllowedIPs)

	return p, true
}

// endpointAllowed applies machine.network.kubespan.filters.endpoints: an address passes when it
// is in one of the CIDRs (any, when only exclusions are given) and in none of the "!" ones.
func endpointAllowed(addr netip.Addr, filters []string) bool {
	included, positives := false, false

	for _, f := range filters {
		neg := strings.HasPrefix(f, "!")

		p, err := netip.ParsePrefix(strings.TrimPrefix(f, "!"))
		if err != nil {
			continue
		}

		switch {
		case neg && p.Contains(addr):
			return false
		case !neg:
			positives = true
			included = included || p.Contains(addr)
		}
	}

	return included || !positives
}
