// Package process is the process provisioner: each node is a machined process of this host on a
// loopback address of its own, with its own state folder (no root, no network to make).
package process

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/talos-go/talos/internal/provision"
)

// Provisioner is the process provisioner.
type Provisioner struct{}

var _ provision.Provisioner = Provisioner{}

func init() { provision.Register(Provisioner{}) }

// Name is its --provisioner value.
func (Provisioner) Name() string { return provision.ProvisionerProcess }

// Capabilities: the nodes are this host's processes, started with machined's arguments.
func (Provisioner) Capabilities() provision.Capabilities {
	return provision.Capabilities{MachinedArgs: true}
}

// DefaultCIDR is on loopback.
func (Provisioner) DefaultCIDR() string { return provision.DefaultProcessCIDR }

// Check refuses a network off loopback: binding other addresses would need root.
func (Provisioner) Check(r *provision.Request) error {
	if !r.CIDR.Addr().IsLoopback() {
		return fmt.Errorf("--cidr %s is not a loopback network: the process provisioner binds nodes to 127.0.0.0/8 addresses without root", r.CIDR)
	}

	return nil
}

// Configure adds nothing.
func (Provisioner) Configure(*provision.Request) {}

// BasePatches are none.
func (Provisioner) BasePatches() []string { return nil }

// NodeIdentity keeps the default name; the nodes have no machine UUID.
func (Provisioner) NodeIdentity(_ *provision.Request, name string) (string, string) {
	return name, ""
}

// CreateNetwork makes nothing: the nodes bind their loopback addresses themselves.
func (Provisioner) CreateNetwork(context.Context, *provision.Cluster, *provision.Request, io.Writer) error {
	return nil
}

// Launch starts the node's machined through the boot stage, with its config unless
// --skip-injecting-config.
func (Provisioner) Launch(c *provision.Cluster, n *provision.Node, r *provision.Request) error {
	return start(c, n, r.NodeArgs, !r.SkipInjectingConfig)
}

// Started does nothing more.
func (Provisioner) Started(context.Context, *provision.Cluster, *provision.Request, io.Writer) error {
	return nil
}

// StopServices stops nothing: the kind starts no process of its own.
func (Provisioner) StopServices(*provision.Cluster, io.Writer) error { return nil }

// DestroyNetwork removes nothing: the nodes made nothing on the host.
func (Provisioner) DestroyNetwork(*provision.Cluster, io.Writer) error { return nil }

// Describe adds no lines.
func (Provisioner) Describe(*provision.Cluster, io.Writer) {}

// start launches a node detached from the CLI: own session, output to a file in its folder;
// without withConfig it boots into maintenance mode.
func start(c *provision.Cluster, n *provision.Node, extraArgs []string, withConfig bool) error {
	if err := os.MkdirAll(n.State, 0o700); err != nil {
		return err
	}

	args := append(append([]string{}, extraArgs...), "--platform", "container", "--state", n.State, "--address", n.Address)
	if withConfig {
		args = append(args, "--config", n.Config)
	}

	pid, err := c.StartDetached(n.Name+".log", nil, args...)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}

	n.PID = pid

	return nil
}
