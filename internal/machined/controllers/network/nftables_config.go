package network

import (
	"context"

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

// IngressChainID is the chain of the ingress firewall (upstream's).
const IngressChainID = "ingress"

// NfTablesChainConfigController makes the ingress firewall's chain from the config's
// NetworkDefaultActionConfig and NetworkRuleConfig documents: with the default action block,
// only what a rule allows comes in, besides loopback, replies to the node's own connections
// and ICMP; with accept (the default), the rules change nothing and no chain is made unless
// rules are given.
type NfTablesChainConfigController struct{}

// Name implements controller.Controller.
func (ctrl *NfTablesChainConfigController) Name() string {
	return "network.NfTablesChainConfigController"
}

// Inputs implements controller.Controller.
func (ctrl *NfTablesChainConfigController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *NfTablesChainConfigController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.NfTablesChainType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *NfTablesChainConfigController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		var err error

		r.StartTrackingOutputs()

		if cfg != nil {
			if rules := cfg.Config().NetworkRules(); rules.DefaultAction() == nethelpers.DefaultActionBlock || len(rules.Rules()) > 0 {
				if err = safe.WriterModify(ctx, r, network.NewNfTablesChain(network.NamespaceName, IngressChainID), func(res *network.NfTablesChain) error {
					*res.TypedSpec() = IngressChain(rules)

					return nil
				}); err != nil {
					return err
				}
			}
		}

		if err = r.CleanupOutputs(ctx, resource.NewMetadata(network.NamespaceName, network.NfTablesChainType, "", resource.VersionUndefined)); err != nil {
			return err
		}

		return nil
	})
}

// IngressChain is the ingress chain of the rules: a filter chain on input whose policy is the
// default action.
func IngressChain(cfg talosconfig.NetworkRuleConfig) network.NfTablesChainSpec {
	accept, drop := nethelpers.VerdictAccept, nethelpers.VerdictDrop

	spec := network.NfTablesChainSpec{Type: "filter", Hook: nethelpers.ChainHookInput, Priority: nethelpers.ChainPriorityFilter, Policy: nethelpers.VerdictAccept}

	if cfg.DefaultAction() == nethelpers.DefaultActionBlock {
		spec.Policy = nethelpers.VerdictDrop
		spec.Rules = []network.NfTablesRule{
			{MatchIIfName: &network.NfTablesIfNameMatch{InterfaceNames: []string{"lo"}, Operator: nethelpers.OperatorEqual}, Verdict: &accept},
			{MatchConntrackState: &network.NfTablesConntrackStateMatch{States: []nethelpers.ConntrackState{nethelpers.ConntrackStateEstablished, nethelpers.ConntrackStateRelated}}, Verdict: &accept},
			{MatchConntrackState: &network.NfTablesConntrackStateMatch{States: []nethelpers.ConntrackState{nethelpers.ConntrackStateInvalid}}, AnonCounter: true, Verdict: &drop},
			{MatchLayer4: &network.NfTablesLayer4Match{Protocol: nethelpers.ProtocolICMP}, Verdict: &accept},
			{MatchLayer4: &network.NfTablesLayer4Match{Protocol: nethelpers.ProtocolICMPv6}, Verdict: &accept},
		}
	}

	for _, rule := range cfg.Rules() {
		ports := make([]network.PortRange, 0, len(rule.PortRanges()))
		for _, pr := range rule.PortRanges() {
			ports = append(ports, network.PortRange{Lo: pr[0], Hi: pr[1]})
		}

		spec.Rules = append(spec.Rules, network.NfTablesRule{
			MatchSourceAddress: &network.NfTablesAddressMatch{IncludeSubnets: rule.Subnets(), ExcludeSubnets: rule.ExceptSubnets()},
			MatchLayer4:        &network.NfTablesLayer4Match{Protocol: rule.Protocol(), MatchDestinationPort: &network.NfTablesPortMatch{Ranges: ports}},
			Verdict:            &accept,
		})
	}

	return spec
}
