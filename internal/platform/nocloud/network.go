package nocloud

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/platform"
)

// errBridge is the answer to bridges in a network-config: the machine config makes them
// (machine.network.interfaces[].bridge), a network-config here does not.
var errBridge = errors.New("bridges from a network-config are not supported here: make them in the machine config (machine.network.interfaces[].bridge)")

// ParseNetworkConfig reads a network-config document in cloud-init's version 1 or version 2
// (netplan) format, also when it is wrapped in a top-level network: key. What it configures:
// physical links (by name or MAC), their MTU, static IPv4 and IPv6 addresses, DHCPv4 and
// DHCPv6, gateways and routes, name servers, bonds and VLANs. Search domains are read and
// dropped (the machine config's machine.network.searchDomains sets them); bridges are refused. Errors name the field (ethernets.eth0.addresses[1]).
func ParseNetworkConfig(b []byte) (*platform.Network, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}

	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a mapping: give version 1 (a config list) or version 2 (ethernets)")
	}

	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "network" && root.Content[i+1].Kind == yaml.MappingNode {
			root = root.Content[i+1]
		}
	}

	var probe struct {
		Version int `yaml:"version"`
	}

	if err := root.Decode(&probe); err != nil {
		return nil, fmt.Errorf("version: %w", err)
	}

	switch probe.Version {
	case 1:
		var v1 v1Doc
		if err := root.Decode(&v1); err != nil {
			return nil, fmt.Errorf("not a network-config v1: %w", err)
		}

		return v1.network()
	case 2:
		var v2 v2Doc
		if err := root.Decode(&v2); err != nil {
			return nil, fmt.Errorf("not a network-config v2: %w", err)
		}

		return v2.network()
	case 0:
		return nil, errors.New("version: missing: give version: 1 or version: 2")
	default:
		return nil, fmt.Errorf("version: %d is not a network-config version: give version: 1 or version: 2", probe.Version)
	}
}

// v1Doc is cloud-init's network-config version 1: a list of typed entries.
type v1Doc struct {
	Config []struct {
		Type    string     `yaml:"type"`
		Name    string     `yaml:"name"`
		MAC     string     `yaml:"mac_address"`
		MTU     int        `yaml:"mtu"`
		Subnets []v1Subnet `yaml:"subnets"`
		// type: nameserver
		Address strList `yaml:"address"`
		// type: bond
		BondInterfaces []string          `yaml:"bond_interfaces"`
		Params         map[string]string `yaml:"params"`
		// type: vlan
		VLANLink string `yaml:"vlan_link"`
		VLANID   int    `yaml:"vlan_id"`
		// type: route
		Destination string `yaml:"destination"`
		Gateway     string `yaml:"gateway"`
		Metric      uint32 `yaml:"metric"`
	} `yaml:"config"`
}

type v1Subnet struct {
	Type           string  `yaml:"type"`
	Address        string  `yaml:"address"`
	Netmask        string  `yaml:"netmask"`
	Gateway        string  `yaml:"gateway"`
	DNSNameservers strList `yaml:"dns_nameservers"`
	Routes         []struct {
		Network string `yaml:"network"`
		Netmask string `yaml:"netmask"`
		Gateway string `yaml:"gateway"`
		Metric  uint32 `yaml:"metric"`
	} `yaml:"routes"`
}

func (d v1Doc) network() (*platform.Network, error) {
	n := &platform.Network{}

	for i, c := range d.Config {
		field := fmt.Sprintf("config[%d]", i)

		switch c.Type {
		case "physical", "bond", "vlan":
			if c.Name == "" && (c.MAC == "" || c.Type != "physical") {
				return nil, fmt.Errorf("%s: a %s entry needs a name%s", field, c.Type, map[bool]string{true: " or a mac_address"}[c.Type == "physical"])
			}

			link := platform.Link{Name: c.Name, MAC: strings.ToLower(c.MAC), MTU: c.MTU}

			switch c.Type {
			case "bond":
				bond, err := v1Bond(c.BondInterfaces, c.Params, field)
				if err != nil {
					return nil, err
				}

				link.MAC, link.Kind, link.Bond = "", "bond", bond
			case "vlan":
				vlan, err := platform.NewVLAN(c.VLANLink, c.VLANID, field+".vlan_link", field+".vlan_id")
				if err != nil {
					return nil, err
				}

				link.MAC, link.Kind, link.VLAN = "", "vlan", vlan
			}

			for j, s := range c.Subnets {
				if err := s.apply(n, &link, fmt.Sprintf("%s.subnets[%d]", field, j)); err != nil {
					return nil, err
				}
			}

			n.Links = append(n.Links, link)
		case "nameserver":
			dns, err := addrs(c.Address, field+".address")
			if err != nil {
				return nil, err
			}

			n.Resolvers = appendNew(n.Resolvers, dns...)
		case "route":
			r, err := route(c.Destination, "", c.Gateway, c.Metric, field)
			if err != nil {
				return nil, err
			}

			n.Routes = append(n.Routes, r)
		case "bridge":
			return nil, fmt.Errorf("%s: type bridge: %w", field, errBridge)
		default:
			return nil, fmt.Errorf("%s: type %q is not a network-config v1 entry read here (physical, bond, vlan, nameserver, route)", field, c.Type)
		}
	}

	return n, resolveMembers(n)
}

// resolveMembers names a bond's members and a VLAN's parent as the node finds them: a card
// given with a MAC is found by it (its name in the document is only the one it is given).
func resolveMembers(n *platform.Network) error {
	macs := map[string]string{}
	for _, l := range n.Links {
		if l.Kind == "" && l.MAC != "" {
			macs[l.Name] = l.MAC
		}
	}

	for i := range n.Links {
		l := &n.Links[i]
		if l.Bond != nil {
			for j, m := range l.Bond.Members {
				if mac, ok := macs[m]; ok {
					l.Bond.Members[j] = mac
				}
			}
		}

		if l.VLAN != nil {
			if mac, ok := macs[l.VLAN.Parent]; ok {
				l.VLAN.Parent = mac
			}
		}
	}

	// A name with a MAC is the name the card is given: the MAC finds it.
	for i := range n.Links {
		if n.Links[i].Kind == "" && n.Links[i].MAC != "" {
			n.Links[i].Name = ""
		}
	}

	return nil
}

// v1Bond is a v1 bond entry's members and its params (bond-mode, bond-miimon,
// bond-xmit-hash-policy, bond-lacp-rate; the others are the kernel's defaults).
func v1Bond(members []string, params map[string]string, field string) (*platform.Bond, error) {
	b := &platform.Bond{
		Members: members, Mode: params["bond-mode"], HashPolicy: params["bond-xmit-hash-policy"], LACPRate: params["bond-lacp-rate"],
	}

	if m := params["bond-miimon"]; m != "" {
		v, err := strconv.ParseUint(m, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s.params.bond-miimon: %q is not a number of milliseconds", field, m)
		}

		b.MIIMon = uint32(v)
	}

	return b, b.Check(field+".bond_interfaces", [3]string{field + ".params.bond-mode", field + ".params.bond-xmit-hash-policy", field + ".params.bond-lacp-rate"})
}

// apply adds one subnet of a physical entry to its link.
func (s v1Subnet) apply(n *platform.Network, link *platform.Link, field string) error {
	switch s.Type {
	case "dhcp", "dhcp4":
		link.DHCP4 = true
	case "dhcp6", "ipv6_dhcpv6-stateful":
		link.DHCP6 = true
	case "ipv6_slaac", "ipv6_dhcpv6-stateless":
		// The kernel takes the router's advertisements: nothing to configure.
	case "static", "static6":
		p, err := prefix(s.Address, s.Netmask, field)
		if err != nil {
			return err
		}

		link.Addresses = append(link.Addresses, p)

		if s.Gateway != "" {
			r, err := route("", "", s.Gateway, 0, field)
			if err != nil {
				return err
			}

			link.Routes = append(link.Routes, r)
		}
	default:
		return fmt.Errorf("%s.type: %q is not a subnet type read here (static, static6, dhcp, dhcp4, dhcp6, ipv6_dhcpv6-stateful, ipv6_slaac)", field, s.Type)
	}

	dns, err := addrs(s.DNSNameservers, field+".dns_nameservers")
	if err != nil {
		return err
	}

	n.Resolvers = appendNew(n.Resolvers, dns...)

	for i, r := range s.Routes {
		rt, err := route(r.Network, r.Netmask, r.Gateway, r.Metric, fmt.Sprintf("%s.routes[%d]", field, i))
		if err != nil {
			return err
		}

		link.Routes = append(link.Routes, rt)
	}

	return nil
}

// v2Doc is cloud-init's network-config version 2, netplan's format.
type v2Doc struct {
	Ethernets map[string]v2Ethernet `yaml:"ethernets"`
	Bonds     map[string]v2Bond     `yaml:"bonds"`
	VLANs     map[string]v2VLAN     `yaml:"vlans"`
	Bridges   map[string]any        `yaml:"bridges"`
}

type v2Ethernet struct {
	Match struct {
		Name string `yaml:"name"`
		MAC  string `yaml:"macaddress"`
	} `yaml:"match"`
	v2Addressing `yaml:",inline"`
}

type v2Bond struct {
	Interfaces []string `yaml:"interfaces"`
	Parameters struct {
		Mode               string `yaml:"mode"`
		MIIMonitorInterval uint32 `yaml:"mii-monitor-interval"`
		TransmitHashPolicy string `yaml:"transmit-hash-policy"`
		LACPRate           string `yaml:"lacp-rate"`
	} `yaml:"parameters"`
	v2Addressing `yaml:",inline"`
}

type v2VLAN struct {
	ID           int    `yaml:"id"`
	Link         string `yaml:"link"`
	v2Addressing `yaml:",inline"`
}

// v2Addressing is what every v2 link has: DHCP, MTU, addresses, gateways, routes, name servers.
type v2Addressing struct {
	DHCP4     bool     `yaml:"dhcp4"`
	DHCP6     bool     `yaml:"dhcp6"`
	MTU       int      `yaml:"mtu"`
	Addresses []string `yaml:"addresses"`
	Gateway4  string   `yaml:"gateway4"`
	Gateway6  string   `yaml:"gateway6"`
	Routes    []struct {
		To     string `yaml:"to"`
		Via    string `yaml:"via"`
		Metric uint32 `yaml:"metric"`
	} `yaml:"routes"`
	Nameservers struct {
		Addresses []string `yaml:"addresses"`
	} `yaml:"nameservers"`
}

func (d v2Doc) network() (*platform.Network, error) {
	if len(d.Bridges) > 0 {
		return nil, fmt.Errorf("bridges: %w", errBridge)
	}

	n := &platform.Network{}

	// A bond's members and a VLAN's parent name ethernets by their IDs: the node finds them by
	// the ethernet's name or MAC.
	cards := map[string]string{}

	for _, id := range sortedKeys(d.Ethernets) {
		e, field := d.Ethernets[id], "ethernets."+id

		// The ID is the link's name unless match says which card it is.
		link := platform.Link{Name: id}

		switch {
		case e.Match.MAC != "":
			link.Name, link.MAC = "", strings.ToLower(e.Match.MAC)
		case e.Match.Name != "":
			if strings.ContainsAny(e.Match.Name, "*?[") {
				return nil, fmt.Errorf("%s.match.name: %q: a pattern is not matched here: name the link, or match its macaddress", field, e.Match.Name)
			}

			link.Name = e.Match.Name
		}

		cards[id] = cmp.Or(link.Name, link.MAC)

		if err := e.apply(n, &link, field); err != nil {
			return nil, err
		}
	}

	card := func(id string) string { return cmp.Or(cards[id], id) }

	for _, id := range sortedKeys(d.Bonds) {
		b, field := d.Bonds[id], "bonds."+id

		bond := &platform.Bond{
			Mode: b.Parameters.Mode, MIIMon: b.Parameters.MIIMonitorInterval,
			HashPolicy: b.Parameters.TransmitHashPolicy, LACPRate: b.Parameters.LACPRate,
		}

		for _, m := range b.Interfaces {
			bond.Members = append(bond.Members, card(m))
		}

		params := field + ".parameters."
		if err := bond.Check(field+".interfaces", [3]string{params + "mode", params + "transmit-hash-policy", params + "lacp-rate"}); err != nil {
			return nil, err
		}

		link := platform.Link{Name: id, Kind: "bond", Bond: bond}
		if err := b.apply(n, &link, field); err != nil {
			return nil, err
		}
	}

	for _, id := range sortedKeys(d.VLANs) {
		v, field := d.VLANs[id], "vlans."+id

		vl, err := platform.NewVLAN(v.Link, v.ID, field+".link", field+".id")
		if err != nil {
			return nil, err
		}

		vl.Parent = card(vl.Parent)

		link := platform.Link{Name: id, Kind: "vlan", VLAN: vl}
		if err := v.apply(n, &link, field); err != nil {
			return nil, err
		}
	}

	return n, nil
}

// apply sets a v2 link's addressing on link and adds it to n.
func (e v2Addressing) apply(n *platform.Network, link *platform.Link, field string) error {
	link.MTU, link.DHCP4, link.DHCP6 = e.MTU, e.DHCP4, e.DHCP6

	for i, a := range e.Addresses {
		p, err := prefix(a, "", fmt.Sprintf("%s.addresses[%d]", field, i))
		if err != nil {
			return err
		}

		link.Addresses = append(link.Addresses, p)
	}

	for _, gw := range []struct{ key, addr string }{{"gateway4", e.Gateway4}, {"gateway6", e.Gateway6}} {
		if gw.addr == "" {
			continue
		}

		r, err := route("", "", gw.addr, 0, field+"."+gw.key)
		if err != nil {
			return err
		}

		link.Routes = append(link.Routes, r)
	}

	for i, r := range e.Routes {
		to := r.To
		if to == "default" {
			to = ""
		}

		rt, err := route(to, "", r.Via, r.Metric, fmt.Sprintf("%s.routes[%d]", field, i))
		if err != nil {
			return err
		}

		link.Routes = append(link.Routes, rt)
	}

	dns, err := addrs(e.Nameservers.Addresses, field+".nameservers.addresses")
	if err != nil {
		return err
	}

	n.Resolvers = appendNew(n.Resolvers, dns...)
	n.Links = append(n.Links, *link)

	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// prefix is an address with its prefix length: a CIDR, or an address with a netmask (IPv4) or a
// prefix length as the netmask.
func prefix(address, netmask, field string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(address); err == nil {
		return p, nil
	}

	a, err := netip.ParseAddr(address)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: address %q is not an IP address (give 192.0.2.10/24)", field, address)
	}

	if netmask == "" {
		return netip.Prefix{}, fmt.Errorf("%s: address %q has no prefix length: give %s/<bits> or a netmask", field, address, address)
	}

	if p, err := netip.ParsePrefix(address + "/" + strings.TrimPrefix(netmask, "/")); err == nil {
		return p, nil
	}

	m, err := netip.ParseAddr(netmask)
	if err != nil || !m.Is4() || !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("%s: netmask %q is not an IPv4 netmask or a prefix length", field, netmask)
	}

	bits, err := maskBits(m)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: netmask %q: %w", field, netmask, err)
	}

	return netip.PrefixFrom(a, bits), nil
}

// maskBits is the length of a contiguous IPv4 netmask.
func maskBits(m netip.Addr) (int, error) {
	b := m.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])

	bits := 0
	for v&(1<<31) != 0 {
		bits, v = bits+1, v<<1
	}

	if v != 0 {
		return 0, errors.New("its ones are not contiguous")
	}

	return bits, nil
}

// route is a route to to (a CIDR, or a network with a netmask; empty: the default route of
// via's family) through via.
func route(to, netmask, via string, metric uint32, field string) (platform.Route, error) {
	gw, err := netip.ParseAddr(via)
	if err != nil {
		return platform.Route{}, fmt.Errorf("%s: gateway %q is not an IP address", field, via)
	}

	r := platform.Route{Via: gw, Metric: metric}

	if to != "" && to != "0.0.0.0/0" && to != "::/0" {
		if r.To, err = prefix(to, netmask, field); err != nil {
			return platform.Route{}, err
		}

		r.To = r.To.Masked()

		if r.To.Addr().Is4() != gw.Is4() {
			return platform.Route{}, fmt.Errorf("%s: the route to %s goes through %s, of the other IP family", field, r.To, gw)
		}
	}

	return r, nil
}

// addrs parses name server addresses.
func addrs(list []string, field string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(list))

	for i, s := range list {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %q is not an IP address", field, i, s)
		}

		out = append(out, a)
	}

	return out, nil
}

func appendNew(list []netip.Addr, add ...netip.Addr) []netip.Addr {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}

	return list
}

// strList is a YAML list of strings that may be written as one string.
type strList []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (l *strList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = strings.Fields(n.Value)

		return nil
	}

	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}

	*l = list

	return nil
}
