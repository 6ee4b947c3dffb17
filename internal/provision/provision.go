// Package provision runs local clusters. The process provisioner (no root) runs each node as a
// machined process on its own loopback address with its own state folder; the container
// provisioner (root) runs each node as PID 1 in its own namespaces with the node image as its
// root, on a bridge; the qemu provisioner (root) runs each node as a QEMU guest booting the
// metal boot assets, on a bridge. Nodes are started detached so they outlive the CLI.
//
// This package holds what every kind shares (the request, the configs and secrets, the
// discovery service, the registry, the cluster's state, waiting for health) and the Provisioner
// interface; each kind is a package of its own (process, container, qemu) that registers itself,
// and package providers imports them all.
package provision

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// Node types as recorded in the cluster state.
const (
	TypeControlPlane = "controlplane"
	TypeWorker       = "worker"
	// TypeInit is the first control plane of --with-init-node (machine.type init): it
	// bootstraps etcd itself.
	TypeInit = "init"
)

// IsControlPlane tells a control plane, the init node included.
func (n Node) IsControlPlane() bool { return n.Type == TypeControlPlane || n.Type == TypeInit }

// Node is one node of a local cluster.
type Node struct {
	Name    string `yaml:"name"`
	Type    string `yaml:"type"`
	Address string `yaml:"address"`
	// Address is the node's address: IPv4, or IPv6 in an IPv6-only cluster (--ipv4=false).
	// Address6 is a dual-stack (--ipv6) node's IPv6 address (qemu: the network's ::N, leased
	// over DHCPv6).
	Address6 string `yaml:"address6,omitempty"`
	State    string `yaml:"state"`  // the node's state folder (its disk)
	Config   string `yaml:"config"` // the config it was started with
	PID      int    `yaml:"pid"`

	// Container provisioner: the host end of the node's veth and its cgroup.
	Veth   string `yaml:"veth,omitempty"`
	Cgroup string `yaml:"cgroup,omitempty"`

	// QEMU provisioner: the node's tap on the bridge and its network card's address.
	Tap string `yaml:"tap,omitempty"`
	MAC string `yaml:"mac,omitempty"`
	// UUID is the machine's SMBIOS system UUID (QEMU provisioner).
	UUID string `yaml:"uuid,omitempty"`
}

// Cluster is the recorded state of a local cluster, kept in <dir>/cluster.yaml.
type Cluster struct {
	Name   string `yaml:"name"`
	Dir    string `yaml:"-"`
	CIDR   string `yaml:"cidr"`
	Binary string `yaml:"binary"`
	Nodes  []Node `yaml:"nodes"`

	Provisioner string `yaml:"provisioner,omitempty"` // empty for clusters made before there was a choice: process
	Bridge      string `yaml:"bridge,omitempty"`      // container provisioner: the cluster's bridge
	Image       string `yaml:"image,omitempty"`
	MTU         int    `yaml:"mtu,omitempty"`

	// QEMU provisioner: the boot assets, whether the guests run on KVM, and the network process
	// (DHCP and the nodes' configs at ConfigServer).
	Kernel       string `yaml:"kernel,omitempty"`
	Initrd       string `yaml:"initrd,omitempty"`
	ISO          string `yaml:"iso,omitempty"`
	USB          string `yaml:"usb,omitempty"`
	UKI          string `yaml:"uki,omitempty"`
	DiskImage    string `yaml:"diskImage,omitempty"`
	KVM          bool   `yaml:"kvm,omitempty"`
	ConfigServer string `yaml:"configServer,omitempty"`
	NetworkPID   int    `yaml:"networkPid,omitempty"`

	// PortsPID is the port forwarder's, publishing -p's ports (container provisioner).
	PortsPID int `yaml:"portsPid,omitempty"`

	// Registry is --with-registry's (container provisioner): the nodes' mirror, stopped with
	// the cluster.
	Registry *Registry `yaml:"registry,omitempty"`

	// Discovery is the discovery service create started for the cluster (none with
	// --with-cluster-discovery=false or --discovery-endpoint), stopped with it.
	Discovery *DiscoveryService `yaml:"discovery,omitempty"`
}

// DefaultStateRoot is where clusters are kept: ~/.talos/clusters.
func DefaultStateRoot() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding home folder: %w", err)
	}

	return filepath.Join(home, ".talos", "clusters"), nil
}

func stateFile(dir string) string { return filepath.Join(dir, "cluster.yaml") }

// Load reads a cluster's recorded state.
func Load(root, name string) (*Cluster, error) {
	dir := filepath.Join(root, name)

	data, err := os.ReadFile(stateFile(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cluster %q not found in %s: create it with `talosctl cluster create --name %s`", name, root, name)
	}

	if err != nil {
		return nil, fmt.Errorf("reading cluster state: %w", err)
	}

	var c Cluster
	if err = yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", stateFile(dir), err)
	}

	c.Dir = dir

	return &c, nil
}

// Save writes the cluster's state atomically.
func (c *Cluster) Save() error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}

	tmp := stateFile(c.Dir) + ".tmp"
	if err = os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing cluster state: %w", err)
	}

	return os.Rename(tmp, stateFile(c.Dir))
}

// NodeAddresses assigns addresses in cidr: .2, .3, ... (the .1 is left for a gateway, as
// upstream does).
func NodeAddresses(cidr netip.Prefix, count int) ([]netip.Addr, error) {
	addr := cidr.Masked().Addr().Next()

	out := make([]netip.Addr, 0, count)

	for range count {
		addr = addr.Next()
		if !cidr.Contains(addr) {
			return nil, fmt.Errorf("--cidr %s is too small for %d nodes: use a larger prefix", cidr, count)
		}

		out = append(out, addr)
	}

	return out, nil
}

// Running reports whether the node's recorded process is alive and is this node's.
func (n *Node) Running() bool { return processRunning(n.PID, n.State) }

// Stop sends SIGTERM and waits up to timeout, then SIGKILL.
func (n *Node) Stop(timeout time.Duration) error {
	return StopProcess("node "+n.Name, n.PID, n.State, timeout)
}

// processRunning reports whether pid is alive and its command line holds marker (a folder only
// it uses), which guards against a recycled PID.
func processRunning(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}

	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}

	return strings.Contains(string(cmdline), marker)
}

// exited reports a process that processRunning no longer finds and whose exit is complete: it
// is gone, a zombie, or its pid is another program's now. The kernel empties a dying process's
// cmdline before it closes its files, so until then its listeners still take connections.
func exited(pid int, marker string) bool {
	if processRunning(pid, marker) {
		return false
	}

	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}

	// The state follows the command's name, which is in parentheses and may hold any byte.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
		return true
	}

	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))

	return len(cmdline) > 0 // another program runs under the pid
}

// StopProcess sends SIGTERM to what processRunning finds and waits up to timeout, then SIGKILL,
// until it has exited (its files closed).
func StopProcess(what string, pid int, marker string, timeout time.Duration) error {
	if !processRunning(pid, marker) {
		return nil
	}

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping %s (pid %d): %w", what, pid, err)
	}

	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if exited(pid, marker) {
			return nil
		}

		time.Sleep(50 * time.Millisecond)
	}

	syscall.Kill(pid, syscall.SIGKILL)

	for range 100 {
		if exited(pid, marker) {
			return nil
		}

		time.Sleep(50 * time.Millisecond)
	}

	return fmt.Errorf("%s (pid %d) did not stop", what, pid)
}
