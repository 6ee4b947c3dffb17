package runtime

import (
	"os"
	"os/exec"

	"github.com/siderolabs/talos/pkg/machinery/config/validation"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/imager"
)

// Platform names, as machined's --platform flag and machinery's validation modes spell them.
const (
	PlatformContainer = "container"
	PlatformMetal     = "metal"
)

// Kind is the provisioner that made the node.
type Kind int

const (
	// Process is a node that is a set of processes on the host (the process provisioner): a
	// state folder stands for its disks, and it shares the host's kernel, mounts, processes and
	// network.
	Process Kind = iota
	// Container is a node in its own namespaces on the host's kernel, the node image its root
	// (the container provisioner).
	Container
	// Metal is a node on its own kernel (QEMU, a machine).
	Metal
)

// Mode is what kind of node this machined runs and what the node has of its own. DetectMode
// decides it once at start; every part of machined asks it instead of probing for itself. It is
// also the config validation mode (machinery's validation.RuntimeMode), as upstream's.
type Mode struct {
	Kind Kind
	// PID1: machined is the init of its pid namespace (a launched container or metal node; a
	// process node never is, nor are the tests).
	PID1 bool
	// HasContainerd and HasKubernetesImages: the node image carries containerd, and the
	// Kubernetes images (not the development image of hack/dev-rootfs.sh, nor one built with
	// KUBERNETES=0).
	HasContainerd, HasKubernetesImages bool
}

// A Mode is what machinery validates a config for.
var _ validation.RuntimeMode = Mode{}

// DetectMode is the mode of this machined: the kind from its --platform and --state flags, the
// rest from the process and the node image, probed here once.
func DetectMode(platform, root string) Mode {
	m := Mode{Kind: Metal, PID1: os.Getpid() == 1, HasContainerd: imageHasContainerd()}

	if platform == PlatformContainer {
		m.Kind = Container
		if root != "/" {
			m.Kind = Process
		}
	}

	_, err := os.Stat(imager.KubernetesImagesArchive)
	m.HasKubernetesImages = err == nil

	return m
}

// imageHasContainerd reports whether containerd is at the node image's place or on PATH.
func imageHasContainerd() bool {
	if _, err := os.Stat("/usr/bin/containerd"); err == nil {
		return true
	}

	_, err := exec.LookPath("containerd")

	return err == nil
}

// SharesHost reports whether the node is a set of processes on the host: its root is a state
// folder, and it shares the host's mounts, processes and network. Any other node has its own
// root and namespaces, and /proc, /sys and netlink show the node itself.
func (m Mode) SharesHost() bool { return m.Kind == Process }

// OwnKernel reports whether the node runs on its own kernel (metal): it sets the kernel's
// parameters, keeps its clock and configures its links.
func (m Mode) OwnKernel() bool { return m.Kind == Metal }

// ContainerNode reports whether machined is the init of a node in a container, started by the
// container provisioner's launcher: its hostname, /etc/hosts, reboot and wipe go through what
// the launcher set up.
func (m Mode) ContainerNode() bool { return m.Kind == Container && m.PID1 }

// OwnNetwork reports whether the node has a network namespace of its own (a container node, a
// metal one): it runs its resolvers, host DNS and firewall.
func (m Mode) OwnNetwork() bool { return m.ContainerNode() || m.OwnKernel() }

// OwnsMachine reports whether machined is the init of a machine on its own kernel: the
// machine's disks, devices (udevd), firmware, console and power are the node's.
func (m Mode) OwnsMachine() bool { return m.Kind == Metal && m.PID1 }

// OwnsCgroups reports whether the node's services get cgroups of their own: machined is the
// node's init (container and metal nodes), not a process on a shared host.
func (m Mode) OwnsCgroups() bool { return m.PID1 && !m.SharesHost() }

// RunsContainerd reports whether containerd (and the image cache) runs: machined is the node's
// init and the image carries containerd.
func (m Mode) RunsContainerd() bool { return m.PID1 && m.HasContainerd }

// RunsKubernetes reports whether the node runs Kubernetes: kubelet runs where containerd does
// and the image carries the Kubernetes images. A process node runs no Kubernetes.
func (m Mode) RunsKubernetes() bool { return m.RunsContainerd() && m.HasKubernetesImages }

// Node is the kind of node, for the config fields that differ between them.
func (m Mode) Node() configsupport.Node {
	switch m.Kind {
	case Process:
		return configsupport.Process
	case Container:
		return configsupport.Container
	default:
		return configsupport.Metal
	}
}

// String is the platform's name: a process node is a container-platform one, as upstream.
func (m Mode) String() string {
	if m.Kind == Metal {
		return PlatformMetal
	}

	return PlatformContainer
}

// RequiresInstall reports whether the node installs to disk (metal only).
func (m Mode) RequiresInstall() bool { return m.Kind == Metal }

// InContainer reports whether the node runs without its own kernel.
func (m Mode) InContainer() bool { return m.Kind != Metal }
