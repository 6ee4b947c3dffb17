package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/portforward"
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

// containerProvisioner runs each node as PID 1 in its own namespaces with the node image as its
// root, on a bridge (root).
type containerProvisioner struct{}

var _ Provisioner = containerProvisioner{}

func init() { Register(containerProvisioner{}) }

func (containerProvisioner) Name() string { return ProvisionerContainer }

func (containerProvisioner) Capabilities() Capabilities {
	return Capabilities{Bridge: true, ImageKubernetes: true, Registry: true}
}

func (containerProvisioner) DefaultCIDR() string { return DefaultContainerCIDR }

func (containerProvisioner) Check(r *Request) error { return r.checkContainer() }

func (containerProvisioner) Configure(*Request) {}

func (containerProvisioner) BasePatches() []string { return []string{containerKubelet} }

func (containerProvisioner) NodeIdentity(_ *Request, name string) (string, string) {
	return name, ""
}

// CreateNetwork makes the bridge and publishes -p's ports.
func (containerProvisioner) CreateNetwork(_ context.Context, c *Cluster, r *Request, progress io.Writer) error {
	if err := c.createNetwork(*r, progress); err != nil {
		return err
	}

	return c.publishPorts(*r, progress)
}

func (containerProvisioner) Launch(c *Cluster, n *Node, r *Request) error {
	return c.startContainer(n, r)
}

func (containerProvisioner) Started(context.Context, *Cluster, *Request, io.Writer) error {
	return nil
}

// DestroyNetwork stops the port forwarder, then removes the nodes' cgroups and links and the
// bridge.
func (containerProvisioner) DestroyNetwork(c *Cluster, progress io.Writer) error {
	if c.PortsPID != 0 {
		fmt.Fprintf(progress, "stopping the port forwarder\n")

		if err := StopProcess("the port forwarder", c.PortsPID, c.Dir, 10*time.Second); err != nil {
			return err
		}
	}

	return c.destroyNetwork(progress)
}

func (containerProvisioner) Describe(c *Cluster, w io.Writer) {
	fmt.Fprintf(w, "BRIDGE            %s\nMTU               %d\nIMAGE             %s\n", c.Bridge, c.MTU, c.Image)
}

// containerKubelet is what kubelet on a container node gets before the user's patches, as kind
// does: the node's filesystems are the host's, whose free share says nothing about the node, so
// kubelet neither evicts pods nor deletes images over it (a host disk 85% full set DiskPressure
// on every node and left new pods Failed).
const containerKubelet = `{"machine": {"kubelet": {"extraConfig": {
	"evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
	"imageGCHighThresholdPercent": 100}}}}`

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

// geteuid is os.Geteuid, replaced in tests to check the refusal without root.
var geteuid = os.Geteuid

func (r *Request) checkContainer() error {
	c := r.Container

	switch {
	case geteuid() != 0:
		return errors.New("the container provisioner needs root (it makes namespaces, a bridge, loop mounts and cgroups): run it as root, or use `--provisioner process`, which needs none")
	case !r.CIDR.Addr().Is4() || r.CIDR.Addr().IsLoopback():
		return fmt.Errorf("--cidr %s: the container provisioner needs an IPv4 network off loopback, like %s", r.CIDR, DefaultContainerCIDR)
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

// publishPorts starts the cluster's port forwarder for -p: its listeners are made here, so a
// port in use is refused at once.
func (c *Cluster) publishPorts(req Request, progress io.Writer) error {
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

// shortHash names host links after a cluster folder: link names are at most 15 bytes.
func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))

	return hex.EncodeToString(sum[:])[:n]
}

// gateway is the first address of the cluster network, given to the bridge.
func Gateway(cidr netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(cidr.Masked().Addr().Next(), cidr.Bits())
}

// createNetwork records the container nodes' links and cgroups and makes the bridge.
func (c *Cluster) createNetwork(req Request, progress io.Writer) error {
	image, err := filepath.Abs(req.Container.Image)
	if err != nil {
		return err
	}

	c.Image, c.MTU, c.Bridge = image, req.Container.MTU, "br-"+shortHash(c.Dir, 12)

	for i := range c.Nodes {
		n := &c.Nodes[i]
		n.Veth = "veth" + shortHash(n.State, 11)
		n.Cgroup = c.Name + "/" + n.Name
	}

	noteCgroups(progress)

	fmt.Fprintf(progress, "creating bridge %s (%s)\n", c.Bridge, Gateway(req.CIDR))

	if err = container.CreateBridge(c.Bridge, Gateway(req.CIDR), c.MTU); err != nil {
		return err
	}

	return masquerade(c.Bridge, req, progress)
}

// noteCgroups says, on a machine with cgroup v1 (legacy or hybrid), that the nodes' cgroups
// are not upstream's: they are the host's v1 hierarchies (see docs/performance.md, Cgroups).
func noteCgroups(progress io.Writer) {
	if !container.Unified() {
		fmt.Fprintln(progress, "this machine runs cgroup v1 (not v2 only): the nodes get cgroup v1 controllers, so their services' cgroups have hard memory limits but no memory.min or memory.low protection and no cpu.weight (docs/performance.md, Cgroups)")
	}
}

// masquerade lets the nodes reach beyond this machine with its address (and turns on its IPv4
// forwarding), except towards --no-masquerade-cidrs.
func masquerade(bridge string, req Request, progress io.Writer) error {
	fmt.Fprintf(progress, "masquerading the cluster network %s behind this machine's addresses (IPv4 forwarding on)\n", req.CIDR.Masked())

	return container.Masquerade(bridge, req.CIDR, req.NoMasqueradeCIDRs)
}

// spec is what the node's launcher gets.
func (c *Cluster) spec(n *Node, req *Request) (container.Spec, error) {
	cidr, err := netip.ParsePrefix(c.CIDR)
	if err != nil {
		return container.Spec{}, err
	}

	addr, err := netip.ParseAddr(n.Address)
	if err != nil {
		return container.Spec{}, err
	}

	limits := container.Limits{CPUs: req.Container.CPUs, MemoryBytes: req.Container.MemoryMB << 20}
	if n.Type == TypeWorker {
		limits = container.Limits{CPUs: req.Container.CPUsWorkers, MemoryBytes: req.Container.MemoryWorker << 20}
	}

	return container.Spec{
		Image: c.Image, Disk: n.State, Hostname: n.Name, Address: netip.PrefixFrom(addr, cidr.Bits()),
		Config: nodeConfig(n, req), Cgroup: n.Cgroup, Limits: limits, Mounts: req.Container.Mounts, DisableIPv6: req.Container.DisableIPv6,
		Network: container.NodeNetwork{Bridge: c.Bridge, HostEnd: n.Veth, Gateway: Gateway(cidr).Addr(), MTU: c.MTU},
	}, nil
}

// nodeConfig is the config a node boots with: none with --skip-injecting-config.
func nodeConfig(n *Node, req *Request) string {
	if req.SkipInjectingConfig {
		return ""
	}

	return n.Config
}

// startContainer launches a node's launcher detached from the CLI: own session, output to a
// file in the cluster folder.
func (c *Cluster) startContainer(n *Node, req *Request) error {
	spec, err := c.spec(n, req)
	if err != nil {
		return err
	}

	specJSON, err := json.Marshal(spec)
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

// destroyNetwork removes what the container and qemu nodes left on the host once they are
// stopped: their cgroups, any host veth end or tap (they go with the node's namespace or QEMU,
// unless a launcher was killed midway) and the bridge.
func (c *Cluster) destroyNetwork(progress io.Writer) error {
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
