// Package services declares the node's system services, one file each; For lists the ones a
// node of a given machine type runs.
package services

import (
	"os"
	"os/exec"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/imager"
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

	// containerd (and its image cache) runs when machined is the node's init (container and
	// metal modes, not a node process on a shared host) and the image carries it (the
	// development image of hack/dev-rootfs.sh has only machined and etcd).
	if os.Getpid() == 1 && imageHasContainerd() {
		svcs = append(svcs, Containerd(r), ImageCache(r))

		// kubelet runs where containerd does and the image carries the Kubernetes images (not
		// one built with KUBERNETES=0); process mode runs no Kubernetes.
		if _, err := os.Stat(imager.KubernetesImagesArchive); err == nil {
			svcs = append(svcs, Kubelet(r))
		}
	}

	return svcs
}

// imageHasContainerd reports whether containerd is at the node image's place or on PATH.
func imageHasContainerd() bool {
	if _, err := os.Stat("/usr/bin/containerd"); err == nil {
		return true
	}

	_, err := exec.LookPath("containerd")

	return err == nil
}
