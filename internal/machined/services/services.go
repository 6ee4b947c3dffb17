// Package services declares the node's system services, one file each; For lists the ones a
// node of a given machine type runs.
package services

import (
	"os"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
)

// For returns the services a configured node of machine type t runs: apid on every node,
// trustd and etcd on control planes. As upstream, a worker does not list etcd or trustd at all.
func For(r *runtime.Runtime, t machine.Type) []*system.Service {
	svcs := []*system.Service{APID(r)}

	if t.IsControlPlane() {
		svcs = append(svcs, Trustd(r), Etcd(r))
	}

	// containerd (and its image cache) runs when machined is the node's init: container and
	// metal modes, not a node process on a shared host.
	if os.Getpid() == 1 {
		svcs = append(svcs, Containerd(r), ImageCache(r))
	}

	return svcs
}
