// Package multicall lists the programs held by the node's multi-call binary.
package multicall

import (
	"github.com/talos-go/talos/internal/apid"
	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/discoveryservice"
	"github.com/talos-go/talos/internal/machined"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/portforward"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
	"github.com/talos-go/talos/internal/registry"
	"github.com/talos-go/talos/internal/trustd"
)

// Commands maps a program name (argv[0] or first argument) to its entry point.
var Commands = map[string]func(args []string) error{
	"machined": machined.Main,
	"apid":     apid.Main,
	"boot":     bootloader.Main,
	// container runs a node in its own namespaces (host side); container-init builds its root.
	"container":      container.Main,
	"container-init": container.InitMain,
	// discovery-service is our server of the upstream discovery API (docs/discovery.md).
	"discovery-service": discoveryservice.Main,
	// metal-init is the initramfs's /init on a kernel (metal mode).
	"metal-init": metal.InitMain,
	// qemu runs a metal node under QEMU (host side); qemu-network is its cluster's DHCP and
	// config server.
	"qemu":         vm.Main,
	"qemu-network": vm.NetworkMain,
	"trustd":       trustd.Main,
	// port-forward publishes a container cluster's ports on the host (-p).
	"port-forward": portforward.Main,
	// registry is a container cluster's image registry (--with-registry).
	"registry": registry.Main,
}
