// Package services declares the node's system services, one file each; For lists the ones a
// node of a given machine type runs.
package services

import (
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

	if r.Mode.RunsContainerd() {
		svcs = append(svcs, Containerd(r), ImageCache(r))
	}

	if r.Mode.RunsKubernetes() {
		svcs = append(svcs, Kubelet(r))
	}

	return svcs
}
