package provision

import (
	"context"
	"fmt"
	"io"
)

// processProvisioner runs each node as a machined process on a loopback address of this host,
// with its own state folder (no root).
type processProvisioner struct{}

var _ Provisioner = processProvisioner{}

func init() { Register(processProvisioner{}) }

func (processProvisioner) Name() string { return ProvisionerProcess }

func (processProvisioner) Capabilities() Capabilities { return Capabilities{MachinedArgs: true} }

func (processProvisioner) DefaultCIDR() string { return DefaultProcessCIDR }

func (processProvisioner) Check(r *Request) error {
	if !r.CIDR.Addr().IsLoopback() {
		return fmt.Errorf("--cidr %s is not a loopback network: the process provisioner binds nodes to 127.0.0.0/8 addresses without root", r.CIDR)
	}

	return nil
}

func (processProvisioner) Configure(*Request) {}

func (processProvisioner) BasePatches() []string { return nil }

func (processProvisioner) NodeIdentity(_ *Request, name string) (string, string) { return name, "" }

// CreateNetwork makes nothing: the nodes bind their loopback addresses themselves.
func (processProvisioner) CreateNetwork(context.Context, *Cluster, *Request, io.Writer) error {
	return nil
}

func (processProvisioner) Launch(c *Cluster, n *Node, r *Request) error {
	return c.start(n, r.NodeArgs, !r.SkipInjectingConfig)
}

func (processProvisioner) Started(context.Context, *Cluster, *Request, io.Writer) error { return nil }

func (processProvisioner) DestroyNetwork(*Cluster, io.Writer) error { return nil }

func (processProvisioner) Describe(*Cluster, io.Writer) {}
