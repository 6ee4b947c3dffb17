package vm

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/insomniacslk/dhcp/iana"
)

// DHCP6Handler is the bridge's DHCPv6 server: it gives each node its fixed IPv6 address
// (NodeLease.Address6, the network's ::N as upstream's): an ADVERTISE to a SOLICIT (a REPLY at
// once when it asks for rapid commit), a REPLY to a REQUEST, RENEW or REBIND. A node is known by
// the MAC in its DUID (DUID-LL or DUID-LLT); other clients get nothing. The server's own DUID is
// the bridge's MAC, read now (the handler runs on other threads, maybe in another namespace).
func (s NetworkSpec) DHCP6Handler() (server6.Handler, error) {
	bridge, err := net.InterfaceByName(s.Bridge)
	if err != nil {
		return nil, err
	}

	server := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: bridge.HardwareAddr}

	return func(conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6) { s.handleDHCP6(server, conn, peer, m) }, nil
}

func (s NetworkSpec) handleDHCP6(server dhcpv6.DUID, conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6) {
	msg, err := m.GetInnerMessage()
	if err != nil {
		return
	}

	var mac net.HardwareAddr

	switch d := msg.Options.ClientID().(type) {
	case *dhcpv6.DUIDLL:
		mac = d.LinkLayerAddr
	case *dhcpv6.DUIDLLT:
		mac = d.LinkLayerAddr
	}

	var lease *NodeLease

	for i := range s.Nodes {
		if mac != nil && strings.EqualFold(s.Nodes[i].MAC, mac.String()) && s.Nodes[i].Address6.IsValid() {
			lease = &s.Nodes[i]
		}
	}

	if lease == nil {
		return
	}

	mods := []dhcpv6.Modifier{dhcpv6.WithServerID(server)}

	iaid := [4]byte{}
	if ia := msg.Options.OneIANA(); ia != nil {
		iaid = ia.IaId
	}

	life := cmp.Or(s.LeaseTime, LeaseTime)
	mods = append(mods, dhcpv6.WithOption(&dhcpv6.OptIANA{
		IaId: iaid, T1: life / 2, T2: life * 4 / 5,
		Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{&dhcpv6.OptIAAddress{
			IPv6Addr: lease.Address6.AsSlice(), PreferredLifetime: life, ValidLifetime: life,
		}}},
	}))

	var dns []net.IP

	for _, a := range s.Nameservers {
		if a.Is6() {
			dns = append(dns, a.AsSlice())
		}
	}

	if len(dns) > 0 {
		mods = append(mods, dhcpv6.WithDNS(dns...))
	}

	var reply *dhcpv6.Message

	switch msg.MessageType {
	case dhcpv6.MessageTypeSolicit:
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
		} else {
			reply, err = dhcpv6.NewAdvertiseFromSolicit(msg, mods...)
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
		reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
	default:
		return
	}

	if err == nil {
		_, err = conn.WriteTo(reply.ToBytes(), peer)
	}

	if err != nil {
		fmt.Fprintf(os.Stderr, "[network] DHCPv6 reply to %s: %v\n", lease.Name, err)

		return
	}

	fmt.Fprintf(os.Stderr, "[network] DHCPv6 %s: %s to %s (%s)\n", msg.MessageType, reply.MessageType, lease.Name, lease.Address6)
}
