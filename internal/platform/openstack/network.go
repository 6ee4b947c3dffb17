package openstack

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/talos-go/talos/internal/platform"
)

// physical are the link types upstream configures as a network card found by its MAC (the
// types of OpenStack's network_data schema that are one card in the guest).
var physical = []string{"phy", "vif", "ovs", "bridge", "tap", "vhostuser", "hw_veb"}

// ndLink is one entry of network_data.json's links.
type ndLink struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	MAC  string `json:"ethernet_mac_address"`
	MTU  int    `json:"mtu"`
	// type bond: its members by link ID and its options
	BondLinks      []string `json:"bond_links"`
	BondMode       string   `json:"bond_mode"`
	BondMIIMon     uint32   `json:"bond_miimon"`
	BondHashPolicy string   `json:"bond_xmit_hash_policy"`
	// type vlan: its parent by link ID
	VLANLink string `json:"vlan_link"`
	VLANID   int    `json:"vlan_id"`
}

// ndNetwork is one entry of network_data.json's networks.
type ndNetwork struct {
	ID      string `json:"id"`
	Link    string `json:"link"`
	Type    string `json:"type"`
	Address string `json:"ip_address"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
	Routes  []struct {
		Network string `json:"network"`
		Netmask string `json:"netmask"`
		Gateway string `json:"gateway"`
	} `json:"routes"`
}

// ndService is one entry of network_data.json's services.
type ndService struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// ParseNetworkData reads a network_data.json as upstream does: links of a physical type are
// the cards with their MAC addresses (a link without one is eth<its index>) and MTU; networks
// give them static IPv4 and IPv6 addresses (ip_address with netmask), a default route through
// gateway and routes, or DHCPv4 (ipv4_dhcp) or DHCPv6 (ipv6_dhcp, ipv6_dhcpv6-stateful,
// ipv6_dhcpv6-stateless); ipv6_slaac is the kernel's; the top-level services of type dns are
// the resolvers. A bond link (bond_links, bond_mode, bond_miimon, bond_xmit_hash_policy) is
// made as bond<N>, N its place among the bonds; a VLAN link (vlan_link, vlan_id) as
// <parent>.<ID> on a bond or a card named in the document, vlan<ID> on a card found by its MAC.
// Other link and network types are refused; errors name the field (networks[1].ip_address).
func ParseNetworkData(b []byte) (*platform.Network, error) {
	var doc struct {
		Links    []json.RawMessage `json:"links"`
		Networks []json.RawMessage `json:"networks"`
		Services []json.RawMessage `json:"services"`
	}

	if err := json.Unmarshal(b, &doc); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf("%s: not a list (\"links\": [...], \"networks\": [...], \"services\": [...])", typeErr.Field)
		}

		return nil, fmt.Errorf("not JSON: %w", err)
	}

	n := &platform.Network{}
	byID := map[string]int{} // link ID to its index in n.Links

	links := make([]ndLink, len(doc.Links))
	for i, raw := range doc.Links {
		if err := decode(raw, &links[i], fmt.Sprintf("links[%d]", i)); err != nil {
			return nil, err
		}
	}

	// The cards first, then the bonds over them, then the VLANs over either: an entry names
	// its members or parent by ID, in any order.
	kinds := []func(l ndLink) bool{
		func(l ndLink) bool { return l.Type != "bond" && l.Type != "vlan" },
		func(l ndLink) bool { return l.Type == "bond" },
		func(l ndLink) bool { return l.Type == "vlan" },
	}

	bonds := 0

	for _, kind := range kinds {
		for i, l := range links {
			if !kind(l) {
				continue
			}

			field := fmt.Sprintf("links[%d]", i)

			if _, dup := byID[l.ID]; dup {
				return nil, fmt.Errorf("%s.id: %q is the id of another link too", field, l.ID)
			}

			link, err := l.link(i, &bonds, n.Links, byID, field)
			if err != nil {
				return nil, err
			}

			byID[l.ID] = len(n.Links)
			n.Links = append(n.Links, link)
		}
	}

	for i, raw := range doc.Networks {
		field := fmt.Sprintf("networks[%d]", i)

		var nw ndNetwork
		if err := decode(raw, &nw, field); err != nil {
			return nil, err
		}

		li, ok := byID[nw.Link]
		if !ok {
			return nil, fmt.Errorf("%s.link: %q is not the id of a link in links", field, nw.Link)
		}

		if err := nw.apply(&n.Links[li], field); err != nil {
			return nil, err
		}
	}

	for i, raw := range doc.Services {
		field := fmt.Sprintf("services[%d]", i)

		var s ndService
		if err := decode(raw, &s, field); err != nil {
			return nil, err
		}

		if s.Type != "dns" || s.Address == "" {
			continue
		}

		a, err := netip.ParseAddr(s.Address)
		if err != nil {
			return nil, fmt.Errorf("%s.address: %q is not an IP address", field, s.Address)
		}

		if !slices.Contains(n.Resolvers, a) {
			n.Resolvers = append(n.Resolvers, a)
		}
	}

	return n, nil
}

// link is the link of entry i: a card, a bond (the bonds'th) over cards or a VLAN over either,
// their members and parents found by ID among the links made before.
func (l ndLink) link(i int, bonds *int, made []platform.Link, byID map[string]int, field string) (platform.Link, error) {
	// The kernel's name of a link made before, else its MAC.
	ref := func(id, idField string) (string, error) {
		j, ok := byID[id]
		if !ok {
			return "", fmt.Errorf("%s: %q is not the id of a card or bond in links", idField, id)
		}

		return cmp.Or(made[j].Name, made[j].MAC), nil
	}

	switch {
	case slices.Contains(physical, l.Type):
	case l.Type == "bond":
		b := &platform.Bond{Mode: l.BondMode, MIIMon: l.BondMIIMon, HashPolicy: l.BondHashPolicy}

		for j, id := range l.BondLinks {
			m, err := ref(id, fmt.Sprintf("%s.bond_links[%d]", field, j))
			if err != nil {
				return platform.Link{}, err
			}

			b.Members = append(b.Members, m)
		}

		if err := b.Check(field+".bond_links", [3]string{field + ".bond_mode", field + ".bond_xmit_hash_policy", field + ".bond_lacp_rate"}); err != nil {
			return platform.Link{}, err
		}

		link := platform.Link{Name: fmt.Sprintf("bond%d", *bonds), Kind: "bond", Bond: b, MTU: l.MTU}
		*bonds++

		// As upstream, the bond takes its ethernet_mac_address (Nova gives a bond its first
		// port's); a VLAN's vlan_mac_address is not read, as upstream.
		if l.MAC != "" {
			mac, err := net.ParseMAC(l.MAC)
			if err != nil {
				return platform.Link{}, fmt.Errorf("%s.ethernet_mac_address: %q is not a MAC address", field, l.MAC)
			}

			link.HardwareAddr = mac.String()
		}

		return link, nil
	case l.Type == "vlan":
		parent := ""
		if l.VLANLink != "" {
			var err error
			if parent, err = ref(l.VLANLink, field+".vlan_link"); err != nil {
				return platform.Link{}, err
			}
		}

		v, err := platform.NewVLAN(parent, l.VLANID, field+".vlan_link", field+".vlan_id")
		if err != nil {
			return platform.Link{}, err
		}

		name := fmt.Sprintf("%s.%d", parent, v.ID)
		if _, err := net.ParseMAC(parent); err == nil {
			name = fmt.Sprintf("vlan%d", v.ID)
		}

		return platform.Link{Name: name, Kind: "vlan", VLAN: v, MTU: l.MTU}, nil
	default:
		return platform.Link{}, fmt.Errorf("%s.type: %q is not a link type read here (%s, bond, vlan)", field, l.Type, strings.Join(physical, ", "))
	}

	link := platform.Link{MTU: l.MTU}

	if l.MAC != "" {
		mac, err := net.ParseMAC(l.MAC)
		if err != nil {
			return platform.Link{}, fmt.Errorf("%s.ethernet_mac_address: %q is not a MAC address", field, l.MAC)
		}

		link.MAC = mac.String()
	} else {
		// As upstream: a card without a MAC is named by its place in links.
		link.Name = fmt.Sprintf("eth%d", i)
	}

	return link, nil
}

// decode reads one entry of a list; a value of the wrong type is named by its field.
func decode(raw json.RawMessage, v any, field string) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return fmt.Errorf("%s: null: give an object", field)
	}

	if err := json.Unmarshal(raw, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			if typeErr.Field == "" {
				return fmt.Errorf("%s: a JSON %s, not an object", field, typeErr.Value)
			}

			return fmt.Errorf("%s.%s: a JSON %s, not a %s", field, typeErr.Field, typeErr.Value, typeErr.Type)
		}

		return fmt.Errorf("%s: %w", field, err)
	}

	return nil
}

// apply adds one network to its link.
func (nw ndNetwork) apply(link *platform.Link, field string) error {
	switch nw.Type {
	case "ipv4_dhcp":
		link.DHCP4 = true
	case "ipv6_dhcp", "ipv6_dhcpv6-stateful", "ipv6_dhcpv6-stateless":
		link.DHCP6 = true
	case "ipv4", "ipv6", "ipv6_slaac":
		// Static (with ip_address), or the router's advertisements, which the kernel takes.
	default:
		return fmt.Errorf("%s.type: %q is not a network type read here (ipv4, ipv6, ipv4_dhcp, ipv6_dhcp, ipv6_dhcpv6-stateful, ipv6_dhcpv6-stateless, ipv6_slaac)", field, nw.Type)
	}

	// As upstream, a network of any type may carry an address, and its gateway with it.
	if nw.Address != "" {
		p, err := prefix(nw.Address, nw.Netmask, field+".ip_address", field+".netmask")
		if err != nil {
			return err
		}

		link.Addresses = append(link.Addresses, p)

		if nw.Gateway != "" {
			gw, err := gateway(nw.Gateway, p.Addr(), field+".gateway")
			if err != nil {
				return err
			}

			link.Routes = append(link.Routes, platform.Route{Via: gw})
		}
	}

	for i, r := range nw.Routes {
		rf := fmt.Sprintf("%s.routes[%d]", field, i)

		to, err := prefix(r.Network, r.Netmask, rf+".network", rf+".netmask")
		if err != nil {
			return err
		}

		gw, err := gateway(r.Gateway, to.Addr(), rf+".gateway")
		if err != nil {
			return err
		}

		route := platform.Route{To: to.Masked(), Via: gw}
		if to.Bits() == 0 {
			// The default route: upstream's metrics, 1024 for IPv4 and 2048 for IPv6 (the
			// node's defaults for a route naming none).
			route.To = netip.Prefix{}
		} else {
			route.Metric = network.DefaultRouteMetric // upstream's, for both families
		}

		link.Routes = append(link.Routes, route)
	}

	return nil
}

// gateway parses a gateway, of the family of the address it serves.
func gateway(s string, of netip.Addr, field string) (netip.Addr, error) {
	gw, err := netip.ParseAddr(s)
	if err != nil {
		return gw, fmt.Errorf("%s: %q is not an IP address", field, s)
	}

	if gw.Is4() != of.Is4() {
		return gw, fmt.Errorf("%s: %s is of the other IP family than %s", field, gw, of)
	}

	return gw, nil
}

// prefix is an address with its prefix length, as upstream reads one: a CIDR, or an address
// with a netmask given as a prefix length or as a mask (IPv4 or IPv6); without one, the
// address alone (/32, /128).
func prefix(address, netmask, addrField, maskField string) (netip.Prefix, error) {
	if a, m, ok := strings.Cut(address, "/"); ok {
		address, netmask, maskField = a, m, addrField
	}

	a, err := netip.ParseAddr(address)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: %q is not an IP address", addrField, address)
	}

	if netmask == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}

	n, err := strconv.Atoi(netmask)
	if err != nil {
		m, err := netip.ParseAddr(netmask)
		if err != nil || m.Is4() != a.Is4() {
			return netip.Prefix{}, fmt.Errorf("%s: %q is not a netmask of %s (give a prefix length or a mask of its IP family)", maskField, netmask, a)
		}

		if n, err = maskBits(m); err != nil {
			return netip.Prefix{}, fmt.Errorf("%s: %q: %w", maskField, netmask, err)
		}
	}

	if n < 0 || n > a.BitLen() {
		return netip.Prefix{}, fmt.Errorf("%s: prefix length %d is out of 0..%d", maskField, n, a.BitLen())
	}

	return netip.PrefixFrom(a, n), nil
}

// maskBits is the length of a contiguous netmask.
func maskBits(m netip.Addr) (int, error) {
	n, done := 0, false

	for _, b := range m.AsSlice() {
		ones := bits.LeadingZeros8(^b)
		if done && b != 0 || ones < 8 && b<<ones != 0 {
			return 0, errors.New("its ones are not contiguous")
		}

		n += ones
		done = done || ones < 8
	}

	return n, nil
}
