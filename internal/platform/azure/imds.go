package azure

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
)

// Compute is what the node reads of IMDS's /metadata/instance/compute document.
type Compute struct {
	Name      string `json:"name"`
	OSProfile struct {
		ComputerName string `json:"computerName"`
	} `json:"osProfile"`
	Location       string `json:"location"`
	Zone           string `json:"zone"`
	FaultDomain    string `json:"platformFaultDomain"`
	VMSize         string `json:"vmSize"`
	VMID           string `json:"vmId"`
	ResourceID     string `json:"resourceId"`
	EvictionPolicy string `json:"evictionPolicy"` // set on Spot VMs only
}

// Interface is one network card of IMDS's /metadata/instance/network/interface list.
type Interface struct {
	IPv4 struct {
		IPAddress []IPAddress `json:"ipAddress"`
	} `json:"ipv4"`
	IPv6 struct {
		IPAddress []IPAddress `json:"ipAddress"`
	} `json:"ipv6"`
}

// IPAddress is one of a card's address pairs; a public address is empty when it has none.
type IPAddress struct {
	PrivateIPAddress string `json:"privateIpAddress"`
	PublicIPAddress  string `json:"publicIpAddress"`
}

// LoadBalancer is what the node reads of IMDS's /metadata/loadbalancer document.
type LoadBalancer struct {
	LoadBalancer struct {
		PublicIPAddresses []struct {
			FrontendIPAddress string `json:"frontendIpAddress"`
			PrivateIPAddress  string `json:"privateIpAddress"`
		} `json:"publicIpAddresses"`
	} `json:"loadbalancer"`
}

// ParseCompute reads a compute document.
func ParseCompute(b []byte) (Compute, error) {
	var c Compute
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("not the compute JSON object: %w", err)
	}

	return c, nil
}

// ParseInterfaces reads the network interface list; an address that is given must be an IP
// address (an error names it by its place in the list).
func ParseInterfaces(b []byte) ([]Interface, error) {
	var ifaces []Interface
	if err := json.Unmarshal(b, &ifaces); err != nil {
		return nil, fmt.Errorf("not the JSON list of network interfaces: %w", err)
	}

	for i, iface := range ifaces {
		for _, f := range []struct {
			family string
			addrs  []IPAddress
		}{{"ipv4", iface.IPv4.IPAddress}, {"ipv6", iface.IPv6.IPAddress}} {
			for j, a := range f.addrs {
				for _, v := range []struct{ field, value string }{{"privateIpAddress", a.PrivateIPAddress}, {"publicIpAddress", a.PublicIPAddress}} {
					if _, err := netip.ParseAddr(v.value); v.value != "" && err != nil {
						return nil, fmt.Errorf("[%d].%s.ipAddress[%d].%s: %q is not an IP address", i, f.family, j, v.field, v.value)
					}
				}
			}
		}
	}

	return ifaces, nil
}

// ParseLoadBalancer reads a load balancer document and returns its frontends' public
// addresses (an IPv6 one may be written [addr]).
func ParseLoadBalancer(b []byte) ([]netip.Addr, error) {
	var lb LoadBalancer
	if err := json.Unmarshal(b, &lb); err != nil {
		return nil, fmt.Errorf("not the load balancer JSON object: %w", err)
	}

	var addrs []netip.Addr

	for i, p := range lb.LoadBalancer.PublicIPAddresses {
		v := strings.TrimPrefix(p.FrontendIPAddress, "[")
		if end := strings.IndexByte(v, ']'); end >= 0 {
			v = v[:end]
		}

		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("loadbalancer.publicIpAddresses[%d].frontendIpAddress: %q is not an IP address", i, p.FrontendIPAddress)
		}

		addrs = append(addrs, a)
	}

	return addrs, nil
}

// resourceGroupRE finds the resource group in a resource ID, as Azure's cloud provider does.
var resourceGroupRE = regexp.MustCompile(`.*/subscriptions/(?:.*)/resourceGroups/(.+)/providers/(?:.*)`)

// ProviderID is the Kubernetes provider ID of a VM, azure://<resource ID>, with its resource
// group in lower case as Azure's cloud provider writes it (Azure's names are case-insensitive).
func ProviderID(resourceID string) (string, error) {
	m := resourceGroupRE.FindStringSubmatch(resourceID)
	if len(m) != 2 {
		return "", fmt.Errorf("resourceId %q is not an Azure resource ID (/subscriptions/<id>/resourceGroups/<group>/providers/...)", resourceID)
	}

	return "azure://" + strings.Replace(resourceID, m[1], strings.ToLower(m[1]), 1), nil
}

// ipv6Gateway is the default IPv6 gateway of an Azure virtual network, for a link without
// router advertisements.
var ipv6Gateway = netip.MustParseAddr("fe80::1234:5678:9abc")

// mtu is eth0's MTU on Azure: its virtual network's encapsulation leaves 1400 bytes.
const mtu = 1400

// Network is the node's network from IMDS, as upstream's: the computer name, DHCPv4 on eth0
// with MTU 1400, and on each card with an IPv6 address (ethN, N its place in the list) DHCPv6
// and a default route through Azure's IPv6 gateway at metric 4096. It also returns the public
// addresses of the cards.
func Network(c Compute, ifaces []Interface) (*platform.Network, []netip.Addr) {
	n := &platform.Network{Hostname: c.OSProfile.ComputerName, Links: []platform.Link{{Name: "eth0", MTU: mtu, DHCP4: true}}}

	var public []netip.Addr

	for i, iface := range ifaces {
		v6 := false

		for _, a := range iface.IPv4.IPAddress {
			if p, err := netip.ParseAddr(a.PublicIPAddress); err == nil {
				public = append(public, p)
			}
		}

		for _, a := range iface.IPv6.IPAddress {
			v6 = v6 || a.PrivateIPAddress != "" || a.PublicIPAddress != ""

			if p, err := netip.ParseAddr(a.PublicIPAddress); err == nil {
				public = append(public, p)
			}
		}

		if !v6 {
			continue
		}

		if i > 0 {
			n.Links = append(n.Links, platform.Link{Name: fmt.Sprintf("eth%d", i)})
		}

		l := &n.Links[len(n.Links)-1]
		l.DHCP6 = true
		l.Routes = append(l.Routes, platform.Route{Via: ipv6Gateway, Metric: 4 * 1024})
	}

	return n, public
}

// Metadata is the node's PlatformMetadata, as upstream's: the zone is <location>-<zone> in a
// zoned region, else the fault domain; the instance ID is the resource ID; a VM with an
// eviction policy is a Spot VM.
func Metadata(c Compute) (runtime.PlatformMetadataSpec, error) {
	providerID, err := ProviderID(c.ResourceID)
	if err != nil {
		return runtime.PlatformMetadataSpec{}, err
	}

	zone := c.FaultDomain
	if c.Zone != "" {
		zone = c.Location + "-" + c.Zone
	}

	return runtime.PlatformMetadataSpec{
		Platform:     platform.Azure,
		Hostname:     c.OSProfile.ComputerName,
		Region:       strings.ToLower(c.Location),
		Zone:         strings.ToLower(zone),
		InstanceType: c.VMSize,
		InstanceID:   c.ResourceID,
		ProviderID:   providerID,
		Spot:         c.EvictionPolicy != "",
	}, nil
}
