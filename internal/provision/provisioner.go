package provision

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"
)

// Provisioner is one kind of local node: what it can honour, how its network is made and torn
// down, and how a node is launched. Create and Destroy run the steps every kind shares (configs,
// secrets, discovery, registry) and call these for the rest; nothing else asks which kind a
// cluster is. Each kind registers itself (Register) under its --provisioner name.
type Provisioner interface {
	// Name is the kind's --provisioner value, recorded in the cluster's state.
	Name() string
	// Capabilities are what the kind's nodes have, which decide the flags that apply to them.
	Capabilities() Capabilities
	// DefaultCIDR is the cluster network when --cidr is not given.
	DefaultCIDR() string
	// Check refuses a request the kind cannot make (root, its network, its assets and flags);
	// it runs before anything is made.
	Check(r *Request) error
	// Configure adds the kind's generate options and patches to the request, before the
	// configs are generated.
	Configure(r *Request)
	// BasePatches are the kind's patches under the user's.
	BasePatches() []string
	// NodeIdentity is a node's name and machine UUID ("" for none), given its default name.
	NodeIdentity(r *Request, name string) (string, string)
	// CreateNetwork makes what the nodes need on the host before the first starts; the
	// cluster's state is saved before it runs, so a failure leaves something to destroy.
	CreateNetwork(ctx context.Context, c *Cluster, r *Request, progress io.Writer) error
	// Launch starts a node detached from the CLI, recording its PID.
	Launch(c *Cluster, n *Node, r *Request) error
	// Started runs once every node is launched (e.g. giving maintenance-mode nodes their
	// configs).
	Started(ctx context.Context, c *Cluster, r *Request, progress io.Writer) error
	// StopServices stops the kind's own processes on the host (a network process, a port
	// forwarder) once the nodes are stopped, before the cluster's shared services.
	StopServices(c *Cluster, progress io.Writer) error
	// DestroyNetwork removes what CreateNetwork and the nodes left on the host, once the nodes
	// and every service are stopped.
	DestroyNetwork(c *Cluster, progress io.Writer) error
	// Describe writes the kind's lines of `cluster show` (after the network CIDR).
	Describe(c *Cluster, w io.Writer)
}

// Capabilities are what a kind's nodes have; create refuses a flag whose capability is missing.
type Capabilities struct {
	// Bridge: the nodes are on a network of their own behind the gateway, a bridge on the host
	// (not the host's loopback): resolvers, masquerading and firewalls apply, and the
	// discovery service takes its fixed port on the gateway.
	Bridge bool
	// OwnKernel: the nodes run their own kernel and disks (VMs): WireGuard, KubeSpan, a VIP,
	// IPv6, user volumes, disk encryption, TPM, IOMMU, UUIDs, JSON logs, and the gateway as
	// time server.
	OwnKernel bool
	// ImageKubernetes: the nodes run the Kubernetes their image carries (they pull no images).
	ImageKubernetes bool
	// Registry: --with-registry, and the docker flags (--mount, -p, --docker-disable-ipv6).
	Registry bool
	// MachinedArgs: the nodes are machined processes of this host, started with NodeArgs
	// (--cert-lifetime).
	MachinedArgs bool
	// GatewayDNS: the cluster's network process answers DNS on the gateway, the nodes' resolver
	// unless --nameservers is given.
	GatewayDNS bool
}

var (
	registryMu   sync.Mutex
	provisioners = map[string]Provisioner{}
)

// Register makes a kind of node available to Create, Destroy and Lookup under its name; the
// kinds register themselves from their packages' init (internal/provision/providers imports
// them all).
func Register(p Provisioner) {
	registryMu.Lock()
	defer registryMu.Unlock()

	if _, ok := provisioners[p.Name()]; ok {
		panic(fmt.Sprintf("provisioner %q registered twice", p.Name()))
	}

	provisioners[p.Name()] = p
}

// Lookup finds the kind named by --provisioner; "" is the process provisioner (clusters made
// before there was a choice record none).
func Lookup(name string) (Provisioner, error) {
	registryMu.Lock()
	defer registryMu.Unlock()

	name = cmp.Or(name, ProvisionerProcess)
	if p, ok := provisioners[name]; ok {
		return p, nil
	}

	return nil, fmt.Errorf("--provisioner %q is unknown: use process (no root needed), container or qemu (root)", name)
}
