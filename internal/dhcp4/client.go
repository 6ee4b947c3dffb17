// Package dhcp4 is the DHCPv4 client of a node's links (RFC 2131 over a raw socket: the link
// may have no address yet): the boot stage's first lease and machined's renewals of it. The
// callers keep their policy (how long to wait, what to do with the lease); this package holds
// the exchange and what a server's ACK says.
package dhcp4

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// requested are the options the node asks every server for.
var requested = dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter,
	dhcpv4.OptionDomainNameServer, dhcpv4.OptionHostName, dhcpv4.OptionNTPServers)

// Client asks the DHCP servers on one link.
type Client struct {
	c *nclient4.Client
}

// Dial opens a client on link: each exchange's message is sent up to 3 times, 3 s apart.
func Dial(link string) (*Client, error) {
	c, err := nclient4.New(link, nclient4.WithTimeout(3*time.Second), nclient4.WithRetry(3))
	if err != nil {
		return nil, fmt.Errorf("DHCP on %s: %w", link, err)
	}

	return &Client{c: c}, nil
}

// Close closes the client's socket.
func (c *Client) Close() error { return c.c.Close() }

// Request asks for a new lease (DISCOVER, OFFER, REQUEST, ACK), for the address want when it
// is not nil (the link's current one, kept across a restart).
func (c *Client) Request(ctx context.Context, want net.IP) (*nclient4.Lease, error) {
	mods := []dhcpv4.Modifier{requested}
	if want != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(want)))
	}

	return c.c.Request(ctx, mods...)
}

// Renew asks lease's server to extend it.
func (c *Client) Renew(ctx context.Context, lease *nclient4.Lease) (*nclient4.Lease, error) {
	return c.c.Renew(ctx, lease)
}

// Address is the address and prefix an ACK gives; false when it lacks either.
func Address(ack *dhcpv4.DHCPv4) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	bits, _ := ack.SubnetMask().Size()

	if !ok || bits == 0 {
		return netip.Prefix{}, false
	}

	return netip.PrefixFrom(addr, bits), true
}

// Gateway is the ACK's first router; false when it names none.
func Gateway(ack *dhcpv4.DHCPv4) (netip.Addr, bool) {
	routers := ack.Router()
	if len(routers) == 0 {
		return netip.Addr{}, false
	}

	gw, _ := netip.AddrFromSlice(routers[0].To4())

	return gw, true
}

// DNS are the ACK's IPv4 name servers.
func DNS(ack *dhcpv4.DHCPv4) []netip.Addr {
	var dns []netip.Addr

	for _, ip := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(ip.To4()); ok {
			dns = append(dns, a)
		}
	}

	return dns
}

// Duration is how long the lease lasts: the server's time, def when it does not say.
func Duration(l *nclient4.Lease, def time.Duration) time.Duration {
	return l.ACK.IPAddressLeaseTime(def)
}

// Times are the lease's T1 (renew), T2 (rebind) and end, the server's when it gives them, else
// RFC 2131's half and seven eighths of its duration (an hour when the server does not say).
func Times(l *nclient4.Lease) (t1, t2, end time.Time) {
	d := Duration(l, time.Hour)

	return l.CreationTime.Add(l.ACK.IPAddressRenewalTime(d / 2)), l.CreationTime.Add(l.ACK.IPAddressRebindingTime(d * 7 / 8)), l.CreationTime.Add(d)
}
