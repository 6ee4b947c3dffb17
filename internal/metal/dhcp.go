package metal

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/dhcp4"
	"github.com/talos-go/talos/internal/dhcp6"
)

// dhcpTimeout bounds the boot's wait for a lease on one link.
const dhcpTimeout = 30 * time.Second

// Lease is what a DHCPv4 or DHCPv6 server gave one link.
type Lease struct {
	Link     string
	Address  netip.Prefix
	Gateway  netip.Addr
	DNS      []netip.Addr
	Hostname string
	Duration time.Duration
}

// dhcpLinks names the links DHCP runs on: every one that is not loopback and not in ignore
// (talos.network.interface.ignore).
func dhcpLinks(c *rtnetlink.Conn, ignore []string) ([]string, error) {
	links, err := c.Link.List()
	if err != nil {
		return nil, err
	}

	var names []string

	for _, l := range links {
		if l.Attributes == nil || l.Type == unix.ARPHRD_LOOPBACK || slices.Contains(ignore, l.Attributes.Name) {
			continue
		}

		names = append(names, l.Attributes.Name)
	}

	slices.Sort(names)

	return names, nil
}

// v4Grace is how long a link that leased an IPv6 address waits for an IPv4 lease too: a
// dual-stack network's node keeps its IPv4 address as its own, as it would without DHCPv6.
const v4Grace = 3 * time.Second

// acquire brings link up and asks for a lease on it over DHCPv4 and DHCPv6 at once, then
// applies the first (IPv4 preferred): an IPv6-only network answers DHCPv6 only.
func acquire(ctx context.Context, c *rtnetlink.Conn, link string) (Lease, error) {
	idx, err := container.LinkIndex(c, link)
	if err != nil {
		return Lease{Link: link}, err
	}

	// The router's advertisements keep giving the link its IPv6 network's route and the default
	// route even once Kubernetes turns forwarding on (which stops a kernel's accept_ra=1), as
	// upstream's accept_ra=2.
	if err = os.WriteFile("/proc/sys/net/ipv6/conf/"+link+"/accept_ra", []byte("2"), 0o644); err != nil {
		log("%s: accepting router advertisements when forwarding: %v", link, err)
	}

	if err = container.SetLinkUp(c, idx); err != nil {
		return Lease{Link: link}, err
	}

	ctx, cancel := context.WithTimeout(ctx, dhcpTimeout)
	defer cancel()

	v4ctx, cancel4 := context.WithCancel(ctx)
	defer cancel4()

	v6ctx, cancel6 := context.WithCancel(ctx)
	defer cancel6()

	type result struct {
		lease Lease
		err   error
	}

	v4, v6 := make(chan result, 1), make(chan result, 1)

	go func() { l, err := acquire4(v4ctx, link); v4 <- result{l, err} }()
	go func() { l, err := acquire6(v6ctx, link); v6 <- result{l, err} }()

	var (
		l     Lease
		errs  []error
		got6  *Lease
		grace <-chan time.Time
		done4 bool
		done6 bool
	)

	for l.Link == "" {
		select {
		case r := <-v4:
			done4 = true

			if r.err == nil {
				cancel6()

				l = r.lease

				continue
			}

			errs = append(errs, r.err)
		case r := <-v6:
			done6 = true

			if r.err == nil {
				got6, grace = &r.lease, time.After(v4Grace)
			} else {
				errs = append(errs, r.err)
			}
		case <-grace:
			cancel4()

			l = *got6

			continue
		}

		switch {
		case done4 && got6 != nil:
			l = *got6
		case done4 && done6:
			return Lease{Link: link}, errors.Join(errs...)
		}
	}

	if err = container.ConfigureStatic(c, link, l.Address, l.Gateway, network.DefaultRouteMetric); err != nil {
		return l, fmt.Errorf("DHCP on %s: %w", link, err)
	}

	return l, nil
}

// acquire4 asks for an IPv4 lease on link (DISCOVER, OFFER, REQUEST, ACK over a raw socket:
// the link has no address yet).
func acquire4(ctx context.Context, link string) (Lease, error) {
	l := Lease{Link: link}

	client, err := dhcp4.Dial(link)
	if err != nil {
		return l, err
	}
	defer client.Close()

	lease, err := client.Request(ctx, nil)
	if err != nil {
		return l, fmt.Errorf("DHCP on %s: no lease in %s: %w", link, dhcpTimeout, err)
	}

	ack := lease.ACK

	addr, ok := dhcp4.Address(ack)
	if !ok {
		return l, fmt.Errorf("DHCP on %s: the server's ACK has no address or netmask", link)
	}

	l.Address, l.Hostname, l.Duration = addr, ack.HostName(), dhcp4.Duration(lease, 0)
	l.Gateway, _ = dhcp4.Gateway(ack)
	l.DNS = dhcp4.DNS(ack)

	return l, nil
}

// acquire6 asks for an IPv6 address on link over DHCPv6. The address is a /128, as DHCPv6
// gives no prefix length: the network's prefix and default route come from its router's
// advertisements, which the kernel applies.
func acquire6(ctx context.Context, link string) (Lease, error) {
	l, err := dhcp6.Acquire(ctx, link, nil)
	if err != nil {
		return Lease{Link: link}, fmt.Errorf("%w (no lease in %s)", err, dhcpTimeout)
	}

	return Lease{Link: link, Address: netip.PrefixFrom(l.Address, 128), DNS: l.DNS, Duration: l.Valid}, nil
}

// dhcpAll runs DHCP on every link of dhcpLinks and returns the leases in link order; a link
// without a lease is logged and left down. No lease at all is an error.
func dhcpAll(ctx context.Context, ignore []string) ([]Lease, error) {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	links, err := dhcpLinks(c, ignore)
	if err != nil {
		return nil, err
	}

	var leases []Lease

	for _, link := range links {
		l, err := acquire(ctx, c, link)
		if err != nil {
			log("%v", err) // the link stays without an address

			continue
		}

		gw := "none"
		if l.Gateway.IsValid() {
			gw = l.Gateway.String()
		}

		log("DHCP on %s: %s, gateway %s, lease %s", link, l.Address, gw, l.Duration)

		leases = append(leases, l)
	}

	if len(leases) == 0 {
		return nil, fmt.Errorf("DHCP: no lease on any link (tried %s; ignored %s): give a static address with ip=<address>::<gateway>:<netmask>:<hostname>:<device>:off",
			strings.Join(links, ", "), strings.Join(ignore, ", "))
	}

	return leases, nil
}
