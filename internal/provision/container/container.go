// Package container is the container provisioner: each node runs as PID 1 in namespaces of its
// own with the node image as its root (internal/container launches it), on a bridge of the
// cluster's, masqueraded behind the host (root).
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	node "github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/portforward"
	"github.com/talos-go/talos/internal/provision"
)

// Provisioner is the container provisioner.
type Provisioner struct{}

var _ provision.Provisioner = Provisioner{}

func init() { provision.Register(Provisioner{}) }

// Name is its --provisioner value.
func (Provisioner) Name() string { return provision.ProvisionerContainer }

// Capabilities: a bridge, the image's Kubernetes, and upstream's docker flags and registry.
func (Provisioner) Capabilities() provision.Capabilities {
	return provision.Capabilities{Bridge: true, ImageKubernetes: true, Registry: true}
}

// DefaultCIDR is upstream's docker provisioner's.
func (Provisioner) DefaultCIDR() string { return provision.DefaultContainerCIDR }

// geteuid is os.Geteuid, replaced in tests to check the refusal without root.
var geteuid = os.Geteuid

// Check refuses a request without root, off an IPv4 network, or without the node image.
func (Provisioner) Check(r *provision.Request) error {
	c := r.Container

	switch {
	case geteuid() != 0:
		return errors.New("the container provisioner needs root (it makes namespaces, a bridge, loop mounts and cgroups): run it as root, or use `--provisioner process`, which needs none")
	case !r.CIDR.Addr().Is4() || r.CIDR.Addr().IsLoopback():
		return fmt.Errorf("--cidr %s: the container provisioner needs an IPv4 network off loopback, like %s", r.CIDR, provision.DefaultContainerCIDR)
	case c.Image == "":
		return errors.New("--image is empty: give the node image (build it with `make rootfs`)")
	case c.MTU < 576 || c.MTU > 65535:
		return fmt.Errorf("--mtu %d is out of range: use 576 to 65535 (1500 is usual)", c.MTU)
	case c.CPUs < 0 || c.CPUsWorkers < 0:
		return errors.New("--cpus and --cpus-workers must not be negative (0: no limit)")
	case c.MemoryMB < 0 || c.MemoryWorker < 0:
		return errors.New("--memory and --memory-workers must not be negative (0: no limit)")
	}

	if _, err := os.Stat(c.Image); err != nil {
		return fmt.Errorf("--image: %w (build the node image with `make rootfs`)", err)
	}

	// Refused here, before anything is made.
	_, err := portforward.Parse(c.ExposedPorts, c.HostIP, r.CIDR.Addr())

	return err
}

// Configure adds nothing.
func (Provisioner) Configure(*provision.Request) {}

// BasePatches are the kubelet defaults of a node on the host's filesystems (kubelet below).
func (Provisioner) BasePatches() []string { return []string{kubelet} }

// kubelet is what kubelet on a container node gets before the user's patches, as kind does: the
// node's filesystems are the host's, whose free share says nothing about the node, so kubelet
// neither evicts pods nor deletes images over it (a host disk 85% full set DiskPressure on every
// node and left new pods Failed).
const kubelet = `{"machine": {"kubelet": {"extraConfig": {
	"evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
	"imageGCHighThresholdPercent": 100}}}}`

// NodeIdentity keeps the default name; the nodes have no machine UUID.
func (Provisioner) NodeIdentity(_ *provision.Request, name string) (string, string) {
	return name, ""
}

// CreateNetwork makes the bridge and publishes -p's ports.
func (Provisioner) CreateNetwork(_ context.Context, c *provision.Cluster, r *provision.Request, progress io.Writer) error {
	if err := createNetwork(c, *r, progress); err != nil {
		return err
	}

	return publishPorts(c, *r, progress)
}

// Launch starts the node's launcher (the node binary's container command).
func (Provisioner) Launch(c *provision.Cluster, n *provision.Node, r *provision.Request) error {
	sp, err := spec(c, n, r)
	if err != nil {
		return err
	}

	specJSON, err := json.Marshal(sp)
	if err != nil {
		return err
	}

	if err = os.MkdirAll(n.State, 0o700); err != nil {
		return err
	}

	pid, err := c.StartDetached(n.Name+".log", nil, "container", "--spec", string(specJSON))
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}

	n.PID = pid

	return nil
}

// Started does nothing more.
func (Provisioner) Started(context.Context, *provision.Cluster, *provision.Request, io.Writer) error {
	return nil
}

// StopServices stops the port forwarder of -p.
func (Provisioner) StopServices(c *provision.Cluster, progress io.Writer) error {
	if c.PortsPID == 0 {
		return nil
	}

	fmt.Fprintf(progress, "stopping the port forwarder\n")

	return provision.StopProcess("the port forwarder", c.PortsPID, c.Dir, 10*time.Second)
}

// DestroyNetwork removes the nodes' cgroups and links and the bridge.
func (Provisioner) DestroyNetwork(c *provision.Cluster, progress io.Writer) error {
	return c.RemoveNetwork(progress)
}

// Describe adds the bridge, its MTU and the node image, once recorded.
func (Provisioner) Describe(c *provision.Cluster, w io.Writer) {
	if c.Bridge == "" {
		return // the create failed before
	}

	fmt.Fprintf(w, "BRIDGE            %s\nMTU               %d\nIMAGE             %s\n", c.Bridge, c.MTU, c.Image)
}

// publishPorts starts the cluster's port forwarder for -p: its listeners are made here, so a
// port in use is refused at once.
func publishPorts(c *provision.Cluster, req provision.Request, progress io.Writer) error {
	cp, err := netip.ParseAddr(c.Nodes[0].Address)
	if err != nil {
		return err
	}

	rules, err := portforward.Parse(req.Container.ExposedPorts, req.Container.HostIP, cp)
	if err != nil || len(rules) == 0 {
		return err
	}

	files, err := portforward.Listen(rules)
	if err != nil {
		return err
	}

	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()

	rulesJSON, err := json.Marshal(rules)
	if err != nil {
		return err
	}

	for _, r := range rules {
		fmt.Fprintf(progress, "publishing %s\n", r)
	}

	c.PortsPID, err = c.StartDetached("ports.log", files, "port-forward", "--cluster", c.Dir, "--rules", string(rulesJSON))

	return err
}

// createNetwork records the container nodes' links and cgroups and makes the bridge.
func createNetwork(c *provision.Cluster, req provision.Request, progress io.Writer) error {
	image, err := filepath.Abs(req.Container.Image)
	if err != nil {
		return err
	}

	c.Image, c.MTU, c.Bridge = image, req.Container.MTU, "br-"+provision.ShortHash(c.Dir, 12)

	for i := range c.Nodes {
		n := &c.Nodes[i]
		n.Veth = "veth" + provision.ShortHash(n.State, 11)
		n.Cgroup = c.Name + "/" + n.Name
	}

	noteCgroups(progress)

	fmt.Fprintf(progress, "creating bridge %s (%s)\n", c.Bridge, provision.Gateway(req.CIDR))

	if err = node.CreateBridge(c.Bridge, provision.Gateway(req.CIDR), c.MTU); err != nil {
		return err
	}

	return provision.Masquerade(c.Bridge, req, progress)
}

// noteCgroups says, on a machine with cgroup v1 (legacy or hybrid), that the nodes' cgroups
// are not upstream's: they are the host's v1 hierarchies (see docs/performance.md, Cgroups).
func noteCgroups(progress io.Writer) {
	if !node.Unified() {
		fmt.Fprintln(progress, "this machine runs cgroup v1 (not v2 only): the nodes get cgroup v1 controllers, so their services' cgroups have hard memory limits but no memory.min or memory.low protection and no cpu.weight (docs/performance.md, Cgroups)")
	}
}

// spec is what the node's launcher gets.
func spec(c *provision.Cluster, n *provision.Node, req *provision.Request) (node.Spec, error) {
	cidr, err := netip.ParsePrefix(c.CIDR)
	if err != nil {
		return node.Spec{}, err
	}

	addr, err := netip.ParseAddr(n.Address)
	if err != nil {
		return node.Spec{}, err
	}

	limits := node.Limits{CPUs: req.Container.CPUs, MemoryBytes: req.Container.MemoryMB << 20}
	if n.Type == provision.TypeWorker {
		limits = node.Limits{CPUs: req.Container.CPUsWorkers, MemoryBytes: req.Container.MemoryWorker << 20}
	}

	return node.Spec{
		Image: c.Image, Disk: n.State, Hostname: n.Name, Address: netip.PrefixFrom(addr, cidr.Bits()),
		Config: nodeConfig(n, req), Cgroup: n.Cgroup, Limits: limits, Mounts: req.Container.Mounts, DisableIPv6: req.Container.DisableIPv6,
		Network: node.NodeNetwork{Bridge: c.Bridge, HostEnd: n.Veth, Gateway: provision.Gateway(cidr).Addr(), MTU: c.MTU},
	}, nil
}

// nodeConfig is the config a node boots with: none with --skip-injecting-config.
func nodeConfig(n *provision.Node, req *provision.Request) string {
	if req.SkipInjectingConfig {
		return ""
	}

	return n.Config
}
