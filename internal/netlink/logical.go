// Package netlink creates the logical links (bonds, VLANs, bridges, WireGuard and dummy
// links) through rtnetlink, for machined's link controller and for the initramfs, which makes a
// platform's bonds and VLANs before it addresses them.
package netlink

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"golang.org/x/sys/unix"
)

// The kernel's VLAN and bridge link attributes (linux/if_link.h).
const (
	iflaVLANID          = 1
	iflaVLANProtocol    = 5
	iflaBrSTPState      = 5
	iflaBrVLANFiltering = 7
)

// Modules are the kernel modules of the logical links' kinds.
var Modules = map[string]string{"bond": "bonding", "vlan": "8021q", "bridge": "bridge", "wireguard": "wireguard", "dummy": "dummy"}

// vlanData is a VLAN link's IFLA_INFO_DATA (the rtnetlink module has no VLAN driver).
type vlanData struct {
	id       uint16
	protocol uint16
}

func (v *vlanData) New() rtnetlink.LinkDriver { return &vlanData{} }

func (v *vlanData) Kind() string { return "vlan" }

func (v *vlanData) Encode(ae *mdnetlink.AttributeEncoder) error {
	ae.Uint16(iflaVLANID, v.id)

	if v.protocol != 0 {
		// The protocol is big-endian on the wire (__be16).
		ae.Bytes(iflaVLANProtocol, binary.BigEndian.AppendUint16(nil, v.protocol))
	}

	return nil
}

func (v *vlanData) Decode(ad *mdnetlink.AttributeDecoder) error {
	for ad.Next() {
		if ad.Type() == iflaVLANID {
			v.id = ad.Uint16()
		}
	}

	return nil
}

// bridgeData is a bridge's IFLA_INFO_DATA: spanning tree and VLAN filtering.
type bridgeData struct {
	stp, vlanFiltering bool
}

func (b *bridgeData) New() rtnetlink.LinkDriver { return &bridgeData{} }

func (b *bridgeData) Kind() string { return "bridge" }

func (b *bridgeData) Encode(ae *mdnetlink.AttributeEncoder) error {
	stp := uint32(0)
	if b.stp {
		stp = 1
	}

	ae.Uint32(iflaBrSTPState, stp)

	// Only when asked: a kernel without VLAN filtering refuses the attribute, even off.
	if b.vlanFiltering {
		ae.Uint8(iflaBrVLANFiltering, 1)
	}

	return nil
}

func (b *bridgeData) Decode(*mdnetlink.AttributeDecoder) error { return nil }

// CreateLogical makes the logical link of spec (a VLAN on its parent, a bond, a bridge, a
// WireGuard or dummy link); index gives the links' indexes by name (a VLAN's parent). A link that
// is there already is no error.
func CreateLogical(conn *rtnetlink.Conn, s network.LinkSpecSpec, index map[string]uint32) error {
	attrs := &rtnetlink.LinkAttributes{Name: s.Name, MTU: s.MTU}

	switch s.Kind {
	case "vlan":
		parent, ok := index[s.ParentName]
		if !ok {
			return fmt.Errorf("VLAN %s: no parent link %s yet", s.Name, s.ParentName)
		}

		attrs.Type = parent // IFLA_LINK, in this module's name
		attrs.Info = &rtnetlink.LinkInfo{Kind: "vlan", Data: &vlanData{id: s.VLAN.VID, protocol: uint16(s.VLAN.Protocol)}}
	case "bond":
		attrs.Info = &rtnetlink.LinkInfo{Kind: "bond", Data: BondData(s.BondMaster)}
	case "bridge":
		attrs.Info = &rtnetlink.LinkInfo{Kind: "bridge", Data: &bridgeData{stp: s.BridgeMaster.STP.Enabled, vlanFiltering: s.BridgeMaster.VLAN.FilteringEnabled}}
	case "wireguard":
		attrs.Info = &rtnetlink.LinkInfo{Kind: "wireguard"} // configured after, through its own netlink family
	case "dummy":
		attrs.Info = &rtnetlink.LinkInfo{Kind: "dummy"}
	default:
		return fmt.Errorf("link %s: kind %q is not supported yet", s.Name, s.Kind)
	}

	if err := conn.Link.New(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Attributes: attrs}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating %s %s: %w", s.Kind, s.Name, err)
	}

	return nil
}

// Enslave makes the link with index idx a member of the bond or bridge master (a bond's member
// must be down to join; the caller brings it up again).
func Enslave(conn *rtnetlink.Conn, idx, master uint32) error {
	if err := conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Change: unix.IFF_UP}); err != nil {
		return err
	}

	return conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Attributes: &rtnetlink.LinkAttributes{Master: &master}})
}

// BondData is the bond's IFLA_INFO_DATA when it is created. A zero option is left out, so the
// kernel's default stays (tlb_dynamic_lb, num_peer_notif, resend_igmp, lp_interval and
// packets_per_slave default to 1 there, not 0); use_carrier, on by default in the config and the
// kernel, is sent only when turned off. packets_per_slave is refused by the kernel outside
// balance-rr even at its default, so it is sent in that mode only (the config's validation
// refuses the other mode-bound options in the wrong mode).
func BondData(s network.BondMasterSpec) *driver.Bond {
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
