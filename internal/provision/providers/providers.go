// Package providers registers every kind of local node with package provision: import it (for
// its side effect) where clusters are created or destroyed.
package providers

import (
	// Each registers itself under its --provisioner name.
	_ "github.com/talos-go/talos/internal/provision/container"
	_ "github.com/talos-go/talos/internal/provision/process"
	_ "github.com/talos-go/talos/internal/provision/qemu"
)
