package aws

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/internal/hostname"
)

// Metadata is what the node reads under /latest/meta-data/, each key's document as served
// (trimmed); empty when the service does not have it.
type Metadata struct {
	Hostname          string // hostname
	InstanceID        string // instance-id
	InstanceType      string // instance-type
	InstanceLifeCycle string // instance-life-cycle: spot or on-demand
	LocalHostname     string // local-hostname: the private DNS name
	PublicHostname    string // public-hostname
	PublicIPv4        string // public-ipv4
	Region            string // placement/region
	Zone              string // placement/availability-zone
	TagKeys           string // tags/instance: one key a line (when the instance allows tags in its metadata)
	Tags              map[string]string
	MACs              string               // network/interfaces/macs/: one "<mac>/" a line
	Interfaces        map[string]Interface // by MAC
}

// Interface is a network card's network/interfaces/macs/<mac>/ documents.
type Interface struct {
	DeviceNumber string // device-number: 0 is the primary card
	LocalIPv4s   string // local-ipv4s: one address a line
	IPv6s        string // ipv6s: one address a line
}

// The metadata service's DNS resolver and time servers, as upstream configures them: the
// resolver's IPv6 address is given only when the card has IPv6 (EC2's DHCPv6 names none); both
// time servers always (the node keeps the one that answers).
var (
	ipv6Resolver = netip.MustParseAddr("fd00:ec2::253")
	timeServers  = []string{"169.254.169.123", "fd00:ec2::123"}
)

// Parse turns the metadata into the node's data (no config); source names where it was read,
// for errors, which name the key.
//
// The network is upstream's: the primary card (device-number 0, else the first listed) asks
// DHCPv4 when it has an IPv4 address (or no address at all), DHCPv6 when it has IPv6 addresses;
// the IPv6 default route comes from the router's advertisements.
func Parse(m Metadata, source string) (platform.Data, error) {
	n := &platform.Network{Hostname: m.Hostname, TimeServers: timeServers}

	if err := hostname.Check(m.Hostname); err != nil {
		return platform.Data{}, fmt.Errorf("aws: %shostname: %w", source, err)
	}

	if m.PublicIPv4 != "" {
		ip, err := netip.ParseAddr(m.PublicIPv4)
		if err != nil {
			return platform.Data{}, fmt.Errorf("aws: %spublic-ipv4: %q is not an IP address", source, m.PublicIPv4)
		}

		// The elastic or public address is the VPC's 1:1 NAT, on no card.
		n.ExternalIPs = []netip.Addr{ip}
	}

	link, err := primaryLink(m, source)
	if err != nil {
		return platform.Data{}, err
	}

	if link != nil {
		n.Links = []platform.Link{*link}
		if link.DHCP6 {
			n.Resolvers = []netip.Addr{ipv6Resolver}
		}
	}

	d := platform.Data{Network: n, Metadata: runtime.PlatformMetadataSpec{
		Platform:     platform.AWS,
		Hostname:     m.Hostname,
		Region:       m.Region,
		Zone:         m.Zone,
		InstanceType: m.InstanceType,
		InstanceID:   m.InstanceID,
		ProviderID:   fmt.Sprintf("aws:///%s/%s", m.Zone, m.InstanceID),
		Spot:         m.InstanceLifeCycle == "spot",
		InternalDNS:  m.LocalHostname,
		ExternalDNS:  m.PublicHostname,
	}}

	if len(m.Tags) > 0 {
		d.Metadata.Tags = m.Tags
	}

	return d, nil
}

// primaryLink is the primary card's configuration; nil when the service lists no card.
func primaryLink(m Metadata, source string) (*platform.Link, error) {
	var macs []string

	for _, l := range listLines(m.MACs) {
		mac := strings.TrimSuffix(l, "/")

		if _, err := net.ParseMAC(mac); err != nil {
			return nil, fmt.Errorf("aws: %snetwork/interfaces/macs/: %q is not a MAC address", source, mac)
		}

		macs = append(macs, mac)
	}

	if len(macs) == 0 {
		return nil, nil
	}

	primary := macs[0]

	for _, mac := range macs {
		i := m.Interfaces[mac]
		if i.DeviceNumber == "" {
			continue
		}

		if _, err := strconv.ParseUint(i.DeviceNumber, 10, 16); err != nil {
			return nil, fmt.Errorf("aws: %snetwork/interfaces/macs/%s/device-number: %q is not a number", source, mac, i.DeviceNumber)
		}

		if i.DeviceNumber == "0" {
			primary = mac

			break
		}
	}

	i := m.Interfaces[primary]
	key := source + "network/interfaces/macs/" + primary + "/"

	v4, err := addresses(i.LocalIPv4s, key+"local-ipv4s", true)
	if err != nil {
		return nil, err
	}

	v6, err := addresses(i.IPv6s, key+"ipv6s", false)
	if err != nil {
		return nil, err
	}

	l := &platform.Link{MAC: primary, DHCP4: len(v4) > 0 || m.PublicIPv4 != "", DHCP6: len(v6) > 0}
	if !l.DHCP4 && !l.DHCP6 {
		l.DHCP4 = true // no address listed: IPv4, as upstream
	}

	return l, nil
}

// addresses reads a list of one address a line, of one family.
func addresses(list, key string, v4 bool) ([]netip.Addr, error) {
	var addrs []netip.Addr

	for n, l := range listLines(list) {
		a, err := netip.ParseAddr(l)
		if err != nil || a.Is4() != v4 {
			family := map[bool]string{true: "IPv4", false: "IPv6"}[v4]

			return nil, fmt.Errorf("aws: %s: line %d: %q is not an %s address", key, n+1, l, family)
		}

		addrs = append(addrs, a)
	}

	return slices.Clip(addrs), nil
}
