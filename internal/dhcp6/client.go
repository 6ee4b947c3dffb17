// Package dhcp6 is the DHCPv6 client of a node's links (RFC 8415, addresses only: one IA_NA):
// the boot stage's first lease and machined's renewals of it.
package dhcp6

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/insomniacslk/dhcp/iana"
)

// Lease is one address a DHCPv6 server gave a link, with its times, the name servers it named
// and what a renewal sends back (its server's DUID and the IA_NA).
type Lease struct {
	Link     string
	Address  netip.Addr
	DNS      []netip.Addr
	Obtained time.Time
	// T1 (renew with the server), T2 (ask any server) and Valid (the address goes), from Obtained.
	T1, T2, Valid time.Duration

	client, server dhcpv6.DUID
	iana           *dhcpv6.OptIANA
}

// Renew, Rebind and End are the lease's T1, T2 and end.
func (l Lease) Renew() time.Time  { return l.Obtained.Add(l.T1) }
func (l Lease) Rebind() time.Time { return l.Obtained.Add(l.T2) }
func (l Lease) End() time.Time    { return l.Obtained.Add(l.Valid) }

// exchangeTimeout bounds one exchange's retransmissions.
const exchangeTimeout = 3 * time.Second

// Acquire asks for an address on link: SOLICIT with rapid commit, or ADVERTISE then REQUEST
// when the server does not commit at once. The client's DUID is duid (the config's duidv6), or
// the link's MAC (DUID-LL) when nil, the same on every exchange and boot, so that a server keeps
// the node's binding. It waits for the link's link-local address, which the kernel makes once the
// link is up and checked (DAD).
func Acquire(ctx context.Context, link string, duid dhcpv6.DUID) (Lease, error) {
	client, mac, err := dial(ctx, link)
	if err != nil {
		return Lease{Link: link}, err
	}
	defer client.Close()

	if duid == nil {
		duid = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac}
	}

	reply, err := client.RapidSolicit(ctx, dhcpv6.WithClientID(duid))
	if err != nil {
		return Lease{Link: link}, fmt.Errorf("DHCPv6 on %s: %w", link, err)
	}

	return leaseOf(link, duid, reply)
}

// ParseDUID reads the config's duidv6: a DUID in hex, with or without colons.
func ParseDUID(s string) (dhcpv6.DUID, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err == nil {
		var d dhcpv6.DUID
		if d, err = dhcpv6.DUIDFromBytes(b); err == nil {
			return d, nil
		}
	}

	return nil, fmt.Errorf("duidv6 %q is not a DUID in hex (like 00:03:00:01:52:54:00:05:00:02): %w", s, err)
}

// Renew asks lease's server to extend it (RENEW, from T1), or any server (REBIND, from T2);
// the reply may give another address.
func Renew(ctx context.Context, lease Lease, rebind bool) (Lease, error) {
	client, _, err := dial(ctx, lease.Link)
	if err != nil {
		return lease, err
	}
	defer client.Close()

	msg, err := dhcpv6.NewMessage(dhcpv6.WithClientID(lease.client), dhcpv6.WithOption(dhcpv6.OptElapsedTime(0)), dhcpv6.WithOption(lease.iana),
		dhcpv6.WithRequestedOptions(dhcpv6.OptionDNSRecursiveNameServer))
	if err != nil {
		return lease, err
	}

	msg.MessageType = dhcpv6.MessageTypeRebind
	if !rebind {
		msg.MessageType = dhcpv6.MessageTypeRenew
		msg.AddOption(dhcpv6.OptServerID(lease.server))
	}

	reply, err := client.SendAndRead(ctx, nclient6.AllDHCPRelayAgentsAndServers, msg, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
	if err != nil {
		return lease, fmt.Errorf("DHCPv6 %s on %s: %w", msg.MessageType, lease.Link, err)
	}

	return leaseOf(lease.Link, lease.client, reply)
}

// dial opens a client on link once it has a usable link-local address.
func dial(ctx context.Context, link string) (*nclient6.Client, net.HardwareAddr, error) {
	iface, err := net.InterfaceByName(link)
	if err != nil {
		return nil, nil, fmt.Errorf("DHCPv6 on %s: %w", link, err)
	}

	for {
		client, err := nclient6.New(link, nclient6.WithTimeout(exchangeTimeout), nclient6.WithRetry(3))
		if err == nil {
			return client, iface.HardwareAddr, nil
		}

		// No link-local address yet, or one still tentative (bind refuses it).
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("DHCPv6 on %s: no link-local address to send from: %w", link, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaseOf reads the address, times and name servers of a server's REPLY.
func leaseOf(link string, client dhcpv6.DUID, reply *dhcpv6.Message) (Lease, error) {
	l := Lease{Link: link, Obtained: time.Now(), client: client, server: reply.Options.ServerID()}

	if s := reply.Options.Status(); s != nil && s.StatusCode != iana.StatusSuccess {
		return l, fmt.Errorf("DHCPv6 on %s: the server says %s: %s", link, s.StatusCode, s.StatusMessage)
	}

	l.iana = reply.Options.OneIANA()
	if l.iana == nil || l.iana.Options.OneAddress() == nil {
		return l, fmt.Errorf("DHCPv6 on %s: the server's reply gives no address", link)
	}

	if s := l.iana.Options.Status(); s != nil && s.StatusCode != iana.StatusSuccess {
		return l, fmt.Errorf("DHCPv6 on %s: the server says %s: %s", link, s.StatusCode, s.StatusMessage)
	}

	ia := l.iana.Options.OneAddress()

	addr, ok := netip.AddrFromSlice(ia.IPv6Addr)
	if !ok || !addr.Is6() || addr.Is4In6() || ia.ValidLifetime == 0 {
		return l, errors.New("DHCPv6 on " + link + ": the server's reply gives no usable address")
	}

	l.Address, l.Valid = addr, ia.ValidLifetime

	// RFC 8415 21.4: zero T1 and T2 leave them to the client (half and 80% of the preferred
	// lifetime).
	l.T1, l.T2 = l.iana.T1, l.iana.T2
	if l.T1 == 0 || l.T2 == 0 || l.T1 > l.T2 {
		l.T1, l.T2 = ia.PreferredLifetime/2, ia.PreferredLifetime*4/5
	}

	for _, d := range reply.Options.DNS() {
		if a, ok := netip.AddrFromSlice(d); ok && !a.Is4In6() {
			l.DNS = append(l.DNS, a)
		}
	}

	return l, nil
}
