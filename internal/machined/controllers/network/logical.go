package network

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
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

// linkModules are the kernel modules of the logical links' kinds.
var linkModules = map[string]string{"bond": "bonding", "vlan": "8021q", "bridge": "bridge", "wireguard": "wireguard", "dummy": "dummy"}

// vlanData is a VLAN link's IFLA_INFO_DATA (the rtnetlink module has no VLAN driver).
type vlanData struct {
	id       uint16
	protocol uint16
}

func (v *vlanData) New() rtnetlink.LinkDriver { return &vlanData{} }

func (v *vlanData) Kind() string { return "vlan" }

func (v *vlanData) Encode(ae *netlink.AttributeEncoder) error {
	ae.Uint16(iflaVLANID, v.id)

	if v.protocol != 0 {
		// The protocol is big-endian on the wire (__be16).
		ae.Bytes(iflaVLANProtocol, binary.BigEndian.AppendUint16(nil, v.protocol))
	}

	return nil
}

func (v *vlanData) Decode(ad *netlink.AttributeDecoder) error {
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

func (b *bridgeData) Encode(ae *netlink.AttributeEncoder) error {
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

func (b *bridgeData) Decode(*netlink.AttributeDecoder) error { return nil }

// createLogical makes the logical link of spec (a VLAN on its parent, a bond).
func createLogical(conn *rtnetlink.Conn, s network.LinkSpecSpec, index map[string]uint32) error {
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
		attrs.Info = &rtnetlink.LinkInfo{Kind: "bond", Data: bondData(s.BondMaster)}
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

// enslave makes the link with index idx a member of the bond or bridge master (a bond's member
// must be down to join; the caller brings it up again).
func enslave(conn *rtnetlink.Conn, idx, master uint32) error {
	if err := conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Change: unix.IFF_UP}); err != nil {
		return err
	}

	return conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Attributes: &rtnetlink.LinkAttributes{Master: &master}})
}
