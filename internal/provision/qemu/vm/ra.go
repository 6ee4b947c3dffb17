package vm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

// raInterval is how often the router advertisement is sent unsolicited (RFC 4861 allows 4 s to
// 30 min); a node's router solicitation is answered at once.
const raInterval = 10 * time.Second

// RouterAdvertisement is the advertisement of the cluster's IPv6 network on the bridge: this
// router (its default route, lifetime 30 min) and the network's /64 prefix, on-link; the
// managed and other-config flags send the nodes to DHCPv6 for their addresses and name servers
// (the network's ::N, as upstream's), so the prefix is not for autoconfiguration (SLAAC).
func RouterAdvertisement(prefix netip.Prefix, mac net.HardwareAddr) []byte {
	b := []byte{
		134, 0, 0, 0, // type, code, checksum (the kernel's)
		64, 0xc0, // current hop limit, flags: managed (M), other config (O)
		0, 0, // router lifetime, below
		0, 0, 0, 0, // reachable time: unspecified
		0, 0, 0, 0, // retransmission timer: unspecified
	}
	binary.BigEndian.PutUint16(b[6:], 1800)

	// Source link-layer address option.
	b = append(b, 1, 1)
	b = append(b, mac...)

	// Prefix information option: on-link (L), not autonomous (A).
	pi := make([]byte, 32)
	pi[0], pi[1], pi[2], pi[3] = 3, 4, byte(prefix.Bits()), 0x80
	binary.BigEndian.PutUint32(pi[4:], 86400) // valid lifetime
	binary.BigEndian.PutUint32(pi[8:], 14400) // preferred lifetime
	a := prefix.Masked().Addr().As16()
	copy(pi[16:], a[:])

	return append(b, pi...)
}

// advertise sends the router advertisement on the bridge every raInterval and in answer to
// router solicitations, until ctx ends.
func advertise(ctx context.Context, bridge string, prefix netip.Prefix) error {
	ifi, err := net.InterfaceByName(bridge)
	if err != nil {
		return err
	}

	c, err := icmp.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return fmt.Errorf("router advertisements on %s: %w", bridge, err)
	}
	defer c.Close()

	p := c.IPv6PacketConn()

	// Hop limit 255: a node drops an advertisement that may have crossed a router (RFC 4861).
	for _, set := range []func() error{
		func() error { return p.SetMulticastHopLimit(255) },
		func() error { return p.SetHopLimit(255) },
		func() error { return p.SetMulticastInterface(ifi) },
		func() error { return p.JoinGroup(ifi, &net.IPAddr{IP: net.IPv6linklocalallrouters}) },
		func() error { return p.SetControlMessage(ipv6.FlagInterface, true) },
	} {
		if err = set(); err != nil {
			return fmt.Errorf("router advertisements on %s: %w", bridge, err)
		}
	}

	ra := RouterAdvertisement(prefix, ifi.HardwareAddr)
	all := &net.IPAddr{IP: net.IPv6linklocalallnodes, Zone: bridge}

	solicited := make(chan struct{}, 1)

	go func() {
		buf := make([]byte, 1500)

		for {
			n, cm, _, err := p.ReadFrom(buf)
			if err != nil {
				return
			}

			if n > 0 && buf[0] == byte(ipv6.ICMPTypeRouterSolicitation) && (cm == nil || cm.IfIndex == ifi.Index) {
				select {
				case solicited <- struct{}{}:
				default:
				}
			}
		}
	}()

	ticker := time.NewTicker(raInterval)
	defer ticker.Stop()

	for {
		// Until a node's tap joins, the bridge has no carrier, hence no link-local address to send
		// from: the next tick tries again.
		if _, err = p.WriteTo(ra, nil, all); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "[network] router advertisement on %s: %v\n", bridge, err)
		}

		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-solicited:
		}
	}
}
