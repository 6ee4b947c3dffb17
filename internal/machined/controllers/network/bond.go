package network

import (
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/jsimonetti/rtnetlink/v2/driver"
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

// bondData is the bond's IFLA_INFO_DATA when it is created. A zero option is left out, so the
// kernel's default stays (tlb_dynamic_lb, num_peer_notif, resend_igmp, lp_interval and
// packets_per_slave default to 1 there, not 0); use_carrier, on by default in the config and the
// kernel, is sent only when turned off. packets_per_slave is refused by the kernel outside
// balance-rr even at its default, so it is sent in that mode only (the config's validation
// refuses the other mode-bound options in the wrong mode).
func bondData(s network.BondMasterSpec) *driver.Bond {
	b := &driver.Bond{Mode: driver.BondMode(s.Mode)}

	u32 := func(v uint32) *uint32 {
		if v == 0 {
			return nil
		}

		return &v
	}

	u16 := func(v uint16) *uint16 {
		if v == 0 {
			return nil
		}

		return &v
	}

	u8 := func(v uint8) *uint8 {
		if v == 0 {
			return nil
		}

		return &v
	}

	b.Miimon, b.UpDelay, b.DownDelay = u32(s.MIIMon), u32(s.UpDelay), u32(s.DownDelay)
	b.ArpInterval, b.ResendIgmp, b.MinLinks, b.LpInterval = u32(s.ARPInterval), u32(s.ResendIGMP), u32(s.MinLinks), u32(s.LPInterval)
	b.PeerNotifyDelay, b.Primary = u32(s.PeerNotifyDelay), u32(s.PrimaryIndex)
	b.NumPeerNotif, b.TlbDynamicLb, b.AllSlavesActive = u8(s.NumPeerNotif), u8(s.TLBDynamicLB), u8(s.AllSlavesActive)
	b.AdActorSysPrio, b.AdUserPortKey = u16(s.ADActorSysPrio), u16(s.ADUserPortKey)

	if s.Mode == nethelpers.BondModeRoundrobin {
		b.PacketsPerSlave = u32(s.PacketsPerSlave)
	}

	if !s.UseCarrier {
		off := uint8(0)
		b.UseCarrier = &off
	}

	// The named options: their zero value is the kernel's default.
	if s.HashPolicy != 0 {
		b.XmitHashPolicy = new(driver.BondXmitHashPolicy(s.HashPolicy))
	}

	if s.LACPRate != 0 {
		b.AdLacpRate = new(driver.BondLacpRate(s.LACPRate))
	}

	if s.ARPValidate != 0 {
		b.ArpValidate = new(driver.BondArpValidate(s.ARPValidate))
	}

	if s.ARPAllTargets != 0 {
		b.ArpAllTargets = new(driver.BondArpAllTargets(s.ARPAllTargets))
	}

	if s.PrimaryReselect != 0 {
		b.PrimaryReselect = new(driver.BondPrimaryReselect(s.PrimaryReselect))
	}

	if s.FailOverMac != 0 {
		b.FailOverMac = new(driver.BondFailOverMac(s.FailOverMac))
	}

	if s.ADSelect != 0 {
		b.AdSelect = new(driver.BondAdSelect(s.ADSelect))
	}

	return b
}
