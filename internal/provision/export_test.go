package provision

import (
	"io"
	"net/netip"
)

// What the external tests (package provision_test, which may import the kinds of node) use.
var (
	ProcessRunning  = processRunning
	ListenDiscovery = listenDiscovery
	TailFile        = tailFile
	RegistryFiles   = registryFiles
	Patch           = patch
)

// StartRegistry is startRegistry.
func (c *Cluster) StartRegistry(addr netip.AddrPort, progress io.Writer) error {
	return c.startRegistry(addr, progress)
}
