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

	if runsContainerd() {
		svcs = append(svcs, Containerd(r), ImageCache(r))
	}

	if RunsKubernetes() {
		svcs = append(svcs, Kubelet(r))
	}

	return svcs
}

// runsContainerd: containerd (and its image cache) runs when machined is the node's init
// (container and metal modes, not a node process on a shared host) and the image carries it
// (the development image of hack/dev-rootfs.sh has only machined and etcd).
func runsContainerd() bool {
	return os.Getpid() == 1 && imageHasContainerd()
}

// RunsKubernetes reports whether this node runs Kubernetes: kubelet runs where containerd does
// and the image carries the Kubernetes images (not one built with KUBERNETES=0). Process mode
// runs no Kubernetes.
func RunsKubernetes() bool {
	if !runsContainerd() {
		return false
	}

	_, err := os.Stat(imager.KubernetesImagesArchive)

	return err == nil
}

// imageHasContainerd reports whether containerd is at the node image's place or on PATH.
func imageHasContainerd() bool {
	if _, err := os.Stat("/usr/bin/containerd"); err == nil {
		return true
	}

	_, err := exec.LookPath("containerd")

	return err == nil
}
