package container

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// NodeInterface is the node's side of its veth, as upstream's docker nodes name it.
const NodeInterface = "eth0"

// CreateBridge makes the cluster's bridge with the gateway address (upstream's docker network:
// the host end of every node's veth is a port of it). An existing bridge of that name is refused
// so that a create never takes over a link it did not make.
func CreateBridge(name string, gateway netip.Prefix, mtu int) error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	if _, err = net.InterfaceByName(name); err == nil {
		return fmt.Errorf("a link named %s exists already: destroy the cluster that made it, or pick another --name", name)
	}

	if err = c.Link.New(&rtnetlink.LinkMessage{
		Family:     unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: name, MTU: uint32(mtu), Info: &rtnetlink.LinkInfo{Kind: "bridge"}},
	}); err != nil {
		return fmt.Errorf("creating bridge %s: %w", name, err)
	}

	idx, err := LinkIndex(c, name)
	if err != nil {
		return err
	}

	if err = addAddress(c, idx, gateway); err != nil {
		return fmt.Errorf("bridge %s: %w", name, err)
	}

	return SetLinkUp(c, idx)
}

// DeleteLink removes a link by name; a link that is not there is not an error.
func DeleteLink(name string) error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	idx, err := LinkIndex(c, name)
	if err != nil {
		return nil
	}

	if err = c.Link.Delete(idx); err != nil {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}

	return nil
}

// NodeNetwork is what a node's veth gets.
type NodeNetwork struct {
	Bridge  string       `json:"bridge"`  // host bridge the host end joins
	HostEnd string       `json:"hostEnd"` // host end's name (at most 15 bytes)
	Address netip.Prefix `json:"-"`       // the node's address (Spec.Address)
	Gateway netip.Addr   `json:"gateway"` // the default route (the bridge's address)
	MTU     int          `json:"mtu"`
}

// Attach creates the node's veth: the host end on the bridge, eth0 in the network namespace of
// pid with the address, loopback up and a default route. The veth goes away with the namespace.
func (nn NodeNetwork) Attach(pid int) error {
	host, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer host.Close()

	br, err := LinkIndex(host, nn.Bridge)
	if err != nil {
		return err
	}

	// A host end left by a node whose namespace is still being torn down would block the name.
	if old, err := LinkIndex(host, nn.HostEnd); err == nil {
		host.Link.Delete(old) //nolint:errcheck // a leftover from a crashed run; the add below says if it stays
	}

	if err = host.Link.New(&rtnetlink.LinkMessage{
		Family: unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{
			Name: nn.HostEnd, MTU: uint32(nn.MTU),
			Info: &rtnetlink.LinkInfo{Kind: "veth", Data: &driver.Veth{PeerInfo: &rtnetlink.LinkMessage{
				Family:     unix.AF_UNSPEC,
				Attributes: &rtnetlink.LinkAttributes{Name: NodeInterface, MTU: uint32(nn.MTU), NetNS: rtnetlink.NetNSForPID(uint32(pid))},
			}}},
		},
	}); err != nil {
		return fmt.Errorf("creating veth %s: %w", nn.HostEnd, err)
	}

	hostEnd, err := LinkIndex(host, nn.HostEnd)
	if err != nil {
		return err
	}

	if err = host.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: hostEnd, Attributes: &rtnetlink.LinkAttributes{Master: &br}}); err != nil {
		return fmt.Errorf("adding %s to bridge %s: %w", nn.HostEnd, nn.Bridge, err)
	}

	if err = SetLinkUp(host, hostEnd); err != nil {
		return err
	}

	return nn.configureInside(pid)
}

func (nn NodeNetwork) configureInside(pid int) error {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("opening the node's network namespace: %w", err)
	}
	defer ns.Close()

	c, err := rtnetlink.Dial(&netlink.Config{NetNS: int(ns.Fd())})
	if err != nil {
		return fmt.Errorf("opening rtnetlink in the node's namespace: %w", err)
	}
	defer c.Close()

	lo, err := LinkIndex(c, "lo")
	if err != nil {
		return err
	}

	if err = SetLinkUp(c, lo); err != nil {
		return err
	}

	return ConfigureStatic(c, NodeInterface, nn.Address, nn.Gateway, 0)
}

// ConfigureStatic gives link the address, brings it up and, with a gateway, adds the default
// route through it with the given metric.
func ConfigureStatic(c *rtnetlink.Conn, link string, address netip.Prefix, gateway netip.Addr, metric uint32) error {
	idx, err := LinkIndex(c, link)
	if err != nil {
		return err
	}

	if err = addAddress(c, idx, address); err != nil {
		return fmt.Errorf("node %s: %w", link, err)
	}

	if err = SetLinkUp(c, idx); err != nil {
		return err
	}

	if !gateway.IsValid() {
		return nil
	}

	if err = c.Route.Add(&rtnetlink.RouteMessage{
		Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC, Scope: unix.RT_SCOPE_UNIVERSE, Type: unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{Gateway: gateway.AsSlice(), OutIface: idx, Priority: metric},
	}); err != nil {
		return fmt.Errorf("adding the default route via %s: %w", gateway, err)
	}

	return nil
}

// LinkIndex is the index of the link named name.
func LinkIndex(c *rtnetlink.Conn, name string) (uint32, error) {
	links, err := c.Link.List()
	if err != nil {
		return 0, fmt.Errorf("listing links: %w", err)
	}

	for _, l := range links {
		if l.Attributes != nil && l.Attributes.Name == name {
			return l.Index, nil
		}
	}

	return 0, fmt.Errorf("link %s: %w", name, errNoLink)
}

var errNoLink = errors.New("no such link")

// SetLinkUp brings the link with index idx up.
func SetLinkUp(c *rtnetlink.Conn, idx uint32) error {
	if err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: idx, Flags: unix.IFF_UP, Change: unix.IFF_UP}); err != nil {
		return fmt.Errorf("setting link %d up: %w", idx, err)
	}

	return nil
}

// AddAddress adds an address to a link by name (a bridge's IPv6 gateway, say).
func AddAddress(name string, p netip.Prefix) error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	idx, err := LinkIndex(c, name)
	if err != nil {
		return err
	}

	return addAddress(c, idx, p)
}

func addAddress(c *rtnetlink.Conn, idx uint32, p netip.Prefix) error {
	ip := p.Addr().AsSlice()

	if p.Addr().Is6() {
		// No duplicate address detection: the address is usable (and bindable) at once.
		if err := c.Address.New(&rtnetlink.AddressMessage{
			Family: unix.AF_INET6, PrefixLength: uint8(p.Bits()), Scope: unix.RT_SCOPE_UNIVERSE, Index: idx, Flags: unix.IFA_F_NODAD,
			Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip},
		}); err != nil {
			return fmt.Errorf("adding address %s: %w", p, err)
		}

		return nil
	}

	brd := make(net.IP, len(ip))
	mask := net.CIDRMask(p.Bits(), len(ip)*8)

	for i := range ip {
		brd[i] = ip[i] | ^mask[i]
	}

	if err := c.Address.New(&rtnetlink.AddressMessage{
		Family: unix.AF_INET, PrefixLength: uint8(p.Bits()), Scope: unix.RT_SCOPE_UNIVERSE, Index: idx,
		Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip, Broadcast: brd},
	}); err != nil {
		return fmt.Errorf("adding address %s: %w", p, err)
	}

	return nil
}
