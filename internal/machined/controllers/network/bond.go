package network

import (
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// bondMaster is machine.network.interfaces[].bond as the bond's spec: the mode and every
// bonding option, the named ones parsed (an empty name is the kernel's default), the primary
// member by its link index (0 while that link is not there yet).
func bondMaster(bond talosconfig.Bond, links safe.List[*network.LinkStatus]) (network.BondMasterSpec, error) {
	var (
		s    network.BondMasterSpec
		errs []error
	)

	parse := func(field, value string, set func(string) error) {
		if err := set(value); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", field, value, err))
		}
	}

	parse("mode", bond.Mode(), func(v string) (err error) { s.Mode, err = nethelpers.BondModeByName(v); return err })
	parse("xmitHashPolicy", bond.HashPolicy(), func(v string) (err error) { s.HashPolicy, err = nethelpers.BondXmitHashPolicyByName(v); return err })
	parse("lacpRate", bond.LACPRate(), func(v string) (err error) { s.LACPRate, err = nethelpers.LACPRateByName(v); return err })
	parse("arpValidate", bond.ARPValidate(), func(v string) (err error) { s.ARPValidate, err = nethelpers.ARPValidateByName(v); return err })
	parse("arpAllTargets", bond.ARPAllTargets(), func(v string) (err error) { s.ARPAllTargets, err = nethelpers.ARPAllTargetsByName(v); return err })
	parse("primaryReselect", bond.PrimaryReselect(), func(v string) (err error) { s.PrimaryReselect, err = nethelpers.PrimaryReselectByName(v); return err })
	parse("failOverMac", bond.FailOverMac(), func(v string) (err error) { s.FailOverMac, err = nethelpers.FailOverMACByName(v); return err })
	parse("adSelect", bond.ADSelect(), func(v string) (err error) { s.ADSelect, err = nethelpers.ADSelectByName(v); return err })

	if len(errs) > 0 {
		return network.BondMasterSpec{}, errs[0]
	}

	if p := bond.Primary(); p != "" {
		for link := range links.All() {
			if link.Metadata().ID() == p {
				s.PrimaryIndex = link.TypedSpec().Index
			}
		}
	}

	s.MIIMon, s.UpDelay, s.DownDelay = bond.MIIMon(), bond.UpDelay(), bond.DownDelay()
	s.ARPInterval, s.ResendIGMP, s.MinLinks, s.LPInterval = bond.ARPInterval(), bond.ResendIGMP(), bond.MinLinks(), bond.LPInterval()
	s.PacketsPerSlave, s.NumPeerNotif, s.TLBDynamicLB = bond.PacketsPerSlave(), bond.NumPeerNotif(), bond.TLBDynamicLB()
	s.AllSlavesActive, s.UseCarrier = bond.AllSlavesActive(), bond.UseCarrier()
	s.ADActorSysPrio, s.ADUserPortKey, s.PeerNotifyDelay = bond.ADActorSysPrio(), bond.ADUserPortKey(), bond.PeerNotifyDelay()

	return s, nil
}
