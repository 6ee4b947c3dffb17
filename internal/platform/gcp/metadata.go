package gcp

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/internal/hostname"
)

// Metadata is the metadata server's documents the node reads, as served; empty when the
// server does not have one.
type Metadata struct {
	ProjectID         string // project/project-id
	Name              string // instance/name
	Hostname          string // instance/hostname: a FQDN (<name>.c.<project>.internal, or a zonal one)
	ID                string // instance/id
	MachineType       string // instance/machine-type: projects/<number>/machineTypes/<type>
	Zone              string // instance/zone: projects/<number>/zones/<zone>
	Preemptible       string // instance/scheduling/preemptible: TRUE or FALSE
	Tags              string // instance/tags: a JSON list of the network tags
	NetworkInterfaces string // instance/network-interfaces/?recursive=true&alt=json
}

// NetworkInterface is one card of the network-interfaces document (the fields read).
type NetworkInterface struct {
	MAC         string   `json:"mac"`
	MTU         int      `json:"mtu"`
	IP          string   `json:"ip"`
	IPv6        []string `json:"ipv6"`        // the card's IPv6 ranges (CIDRs)
	GatewayIPv6 string   `json:"gatewayIpv6"` // a link-local address
	// AccessConfigs are the card's NATs; a ONE_TO_ONE_NAT's externalIp is a public address.
	AccessConfigs []struct {
		ExternalIP string `json:"externalIp"`
		Type       string `json:"type"`
	} `json:"accessConfigs"`
}

// The metadata server is the VPC's DNS resolver and time server, as upstream configures them.
var (
	resolver   = netip.MustParseAddr("169.254.169.254")
	timeServer = "metadata.google.internal"
)

// Parse turns the metadata into the node's data (no config); source is the URL the paths are
// under, for errors, which name the document and the field.
//
// The network is upstream's: every card asks DHCPv4 with the server's MTU (1460 on a default
// VPC); a card with IPv6 ranges and an IPv6 gateway gets them as addresses, and its default
// route through the gateway. The region is the zone without its last part.
func Parse(m Metadata, source string) (platform.Data, error) {
	host := strings.TrimSpace(m.Hostname)
	if err := hostname.Check(host); err != nil {
		return platform.Data{}, fmt.Errorf("gcp: %s%s: %w", source, Hostname, err)
	}

	n := &platform.Network{Hostname: host, Resolvers: []netip.Addr{resolver}, TimeServers: []string{timeServer}}

	zone := lastPart(m.Zone)
	region := zone

	if i := strings.LastIndex(zone, "-"); i > 0 {
		region = zone[:i]
	}

	spot := false

	switch p := strings.TrimSpace(m.Preemptible); strings.ToUpper(p) {
	case "TRUE":
		spot = true
	case "FALSE", "":
	default:
		return platform.Data{}, fmt.Errorf("gcp: %s%s: %q is neither TRUE nor FALSE", source, Preemptible, p)
	}

	d := platform.Data{Network: n, Metadata: runtime.PlatformMetadataSpec{
		Platform:     platform.GCP,
		Hostname:     host,
		Region:       region,
		Zone:         zone,
		InstanceType: lastPart(m.MachineType),
		InstanceID:   strings.TrimSpace(m.ID),
		ProviderID:   fmt.Sprintf("gce://%s/%s/%s", strings.TrimSpace(m.ProjectID), zone, strings.TrimSpace(m.Name)),
		Spot:         spot,
	}}

	if strings.TrimSpace(m.Tags) != "" {
		var tags []string
		if err := json.Unmarshal([]byte(m.Tags), &tags); err != nil {
			return platform.Data{}, fmt.Errorf("gcp: %s%s: not a JSON list of strings: %w", source, Tags, err)
		}

		if len(tags) > 0 {
			d.Metadata.Tags = map[string]string{}
			for _, t := range tags {
				d.Metadata.Tags[t] = ""
			}
		}
	}

	var err error
	if n.Links, n.ExternalIPs, err = links(m.NetworkInterfaces, source+NetworkInterfaces); err != nil {
		return platform.Data{}, err
	}

	return d, nil
}

// links are the cards of the network-interfaces document, in its order, and the external
// (public) addresses of their one-to-one NATs, as upstream reads them.
func links(doc, source string) ([]platform.Link, []netip.Addr, error) {
	if strings.TrimSpace(doc) == "" {
		return nil, nil, nil
	}

	var ifaces []NetworkInterface
	if err := json.Unmarshal([]byte(doc), &ifaces); err != nil {
		return nil, nil, fmt.Errorf("gcp: %s: not a JSON list of network interfaces: %w", source, err)
	}

	var (
		ls       []platform.Link
		external []netip.Addr
	)

	for i, iface := range ifaces {
		field := fmt.Sprintf("gcp: %s: [%d]", source, i)

		// A card is named by its MAC when the server gives it (the kernel's names need not be
		// eth0, eth1 in the server's order), else by upstream's eth<index>.
		l := platform.Link{Name: fmt.Sprintf("eth%d", i), MTU: iface.MTU, DHCP4: true}

		if iface.MAC != "" {
			if _, err := net.ParseMAC(iface.MAC); err != nil {
				return nil, nil, fmt.Errorf("%s.mac: %q is not a MAC address", field, iface.MAC)
			}

			l.Name, l.MAC = "", strings.ToLower(iface.MAC)
		}

		if iface.MTU != 0 && (iface.MTU < 1300 || iface.MTU > 8896) {
			return nil, nil, fmt.Errorf("%s.mtu: %d is not an MTU of a VPC (1300 to 8896)", field, iface.MTU)
		}

		if iface.IP != "" {
			if a, err := netip.ParseAddr(iface.IP); err != nil || !a.Is4() {
				return nil, nil, fmt.Errorf("%s.ip: %q is not an IPv4 address", field, iface.IP)
			}
		}

		var gw netip.Addr

		if iface.GatewayIPv6 != "" {
			var err error
			if gw, err = netip.ParseAddr(iface.GatewayIPv6); err != nil || !gw.Is6() {
				return nil, nil, fmt.Errorf("%s.gatewayIpv6: %q is not an IPv6 address", field, iface.GatewayIPv6)
			}
		}

		for j, r := range iface.IPv6 {
			p, err := netip.ParsePrefix(r)
			if err != nil || !p.Addr().Is6() {
				return nil, nil, fmt.Errorf("%s.ipv6[%d]: %q is not an IPv6 range (address/length)", field, j, r)
			}

			if gw.IsValid() { // as upstream: without a gateway, the ranges are not set
				l.Addresses = append(l.Addresses, p)
			}
		}

		if len(l.Addresses) > 0 {
			l.Routes = []platform.Route{{Via: gw}}
		}

		for j, a := range iface.AccessConfigs {
			if a.Type != "ONE_TO_ONE_NAT" || a.ExternalIP == "" {
				continue
			}

			ip, err := netip.ParseAddr(a.ExternalIP)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.accessConfigs[%d].externalIp: %q is not an IP address", field, j, a.ExternalIP)
			}

			external = append(external, ip)
		}

		ls = append(ls, l)
	}

	return ls, external, nil
}

// lastPart is the last part of a path (a zone's or machine type's name).
func lastPart(s string) string {
	s = strings.TrimSpace(s)

	return s[strings.LastIndex(s, "/")+1:]
}
