package provision

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/talos-go/talos/internal/container"
)

// Provisioners.
const (
	ProvisionerProcess   = "process"
	ProvisionerContainer = "container"
)

// DefaultContainerCIDR is the container provisioner's network, as upstream's docker provisioner.
const DefaultContainerCIDR = "10.5.0.0/24"

// DefaultProcessCIDR is the process provisioner's network, on loopback.
const DefaultProcessCIDR = "127.5.0.0/24"

// ContainerRequest is what only the container provisioner uses (upstream's docker flags).
type ContainerRequest struct {
	Image        string // the node image (squashfs)
	MTU          int
	CPUs         float64 // per control plane; 0: no limit
	CPUsWorkers  float64
	MemoryMB     int64 // per control plane; 0: no limit
	MemoryWorker int64
	// Mounts go into every node (--mount).
	Mounts []container.Mount
	// ExposedPorts (-p) are published on HostIP (--docker-host-ip) and relayed to the first
	// control plane, as upstream's docker provisioner publishes them on its init node.
	ExposedPorts string
	HostIP       string
	DisableIPv6  bool // --docker-disable-ipv6
}

// dockerFlagsUsed names the container provisioner's own flags that a request of another
// provisioner gives, if any.
func (c ContainerRequest) dockerFlagsUsed() string {
	switch {
	case len(c.Mounts) > 0:
		return "--mount"
	case c.ExposedPorts != "":
		return "--exposed-ports"
	case c.DisableIPv6:
		return "--docker-disable-ipv6"
	}

	return ""
}

// ShortHash names host links after a cluster folder: link names are at most 15 bytes.
func ShortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))

	return hex.EncodeToString(sum[:])[:n]
}

// Gateway is the first address of the cluster network, given to the bridge.
func Gateway(cidr netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(cidr.Masked().Addr().Next(), cidr.Bits())
}

// RemoveNetwork removes what the container and qemu nodes left on the host once they are
// stopped: their cgroups, any host veth end or tap (they go with the node's namespace or QEMU,
// unless a launcher was killed midway) and the bridge.
func (c *Cluster) RemoveNetwork(progress io.Writer) error {
	var errs []error

	for _, n := range c.Nodes {
		if n.Cgroup != "" {
			errs = append(errs, container.RemoveCgroup(n.Cgroup))
		}

		for _, link := range []string{n.Veth, n.Tap} {
			if link != "" {
				errs = append(errs, container.DeleteLink(link))
			}
		}
	}

	if c.Bridge != "" {
		fmt.Fprintf(progress, "removing bridge %s\n", c.Bridge)
		errs = append(errs, container.RemoveMasquerade(c.Bridge), container.DeleteLink(c.Bridge))
	}

	return errors.Join(errs...)
}

// Masquerade lets the nodes reach beyond this machine with its address (and turns on its IPv4
// forwarding), except towards --no-masquerade-cidrs.
func Masquerade(bridge string, req Request, progress io.Writer) error {
	fmt.Fprintf(progress, "masquerading the cluster network %s behind this machine's addresses (IPv4 forwarding on)\n", req.CIDR.Masked())

	return container.Masquerade(bridge, req.CIDR, req.NoMasqueradeCIDRs)
}
