// Package images is the one list of the container images a node uses: the Kubernetes
// components, CoreDNS, flannel, pause and etcd, under upstream Talos v1.11's names, with the
// versions this project builds. The imager builds them into the node image's cache
// (/usr/share/talos/images), `talosctl image default` prints the list, and machined takes the
// references for its static pods, kubelet and manifests from here, so the three cannot drift.
package images

import "github.com/talos-go/talos/internal/version"

// Versions of what the images carry. Kubernetes, CoreDNS and flannel are built from their Go
// modules at these versions (see build/kubernetes and internal/imager); etcd is the one in our
// go.mod. Upstream Talos v1.11 defaults to CoreDNS v1.12.2 and flannel v0.27.2; the module
// proxy here serves CoreDNS v1.12.1 and flannel v0.26.7, so the tags say what is really inside.
const (
	KubernetesVersion = "v1.34.0"
	CoreDNSVersion    = "v1.12.1"
	FlannelVersion    = "v0.26.7"
	EtcdVersion       = "v3.6.13"
	PauseVersion      = "3.10"
)

// Image names, as upstream Talos v1.11 has them (machinery's constants hold the same names).
const (
	KubeAPIServerName         = "registry.k8s.io/kube-apiserver"
	KubeControllerManagerName = "registry.k8s.io/kube-controller-manager"
	KubeSchedulerName         = "registry.k8s.io/kube-scheduler"
	KubeProxyName             = "registry.k8s.io/kube-proxy"
	KubeletName               = "ghcr.io/siderolabs/kubelet"
	CoreDNSName               = "registry.k8s.io/coredns/coredns"
	FlannelName               = "ghcr.io/siderolabs/flannel"
	EtcdName                  = "gcr.io/etcd-development/etcd"
	PauseName                 = "registry.k8s.io/pause"
	InstallerName             = "ghcr.io/siderolabs/installer"
)

// References of the images, name:tag.
var (
	KubeAPIServer         = KubeAPIServerName + ":" + KubernetesVersion
	KubeControllerManager = KubeControllerManagerName + ":" + KubernetesVersion
	KubeScheduler         = KubeSchedulerName + ":" + KubernetesVersion
	KubeProxy             = KubeProxyName + ":" + KubernetesVersion
	Kubelet               = KubeletName + ":" + KubernetesVersion
	CoreDNS               = CoreDNSName + ":" + CoreDNSVersion
	Flannel               = FlannelName + ":" + FlannelVersion
	Etcd                  = EtcdName + ":" + EtcdVersion
	Pause                 = PauseName + ":" + PauseVersion
)

// Installer is upstream's upgrade image for this version. `talosctl image default` lists it as
// upstream does; the node image does not carry it (upgrades here take a signed image file).
func Installer() string { return InstallerName + ":" + version.Tag }

// Binary paths inside the images: where upstream's images have them, since static pod specs and
// manifests name them as commands.
const (
	KubeBinDir     = "/usr/local/bin"
	FlanneldPath   = "/opt/bin/flanneld"
	CoreDNSPath    = "/coredns"
	PausePath      = "/pause"
	EtcdPath       = "/usr/local/bin/etcd"
	FlannelCNIPath = "/opt/cni/bin/flannel" // on the node, not in an image
)

// Image is one image of the node image's cache.
type Image struct {
	Ref        string
	Entrypoint []string
}

// Default lists the images of the node image's cache, in the order `talosctl image default`
// prints them (upstream's order, less the installer).
func Default() []Image {
	return []Image{
		{Flannel, []string{FlanneldPath}},
		{CoreDNS, []string{CoreDNSPath}},
		{Etcd, []string{EtcdPath}},
		{KubeAPIServer, []string{KubeBinDir + "/kube-apiserver"}},
		{KubeControllerManager, []string{KubeBinDir + "/kube-controller-manager"}},
		{KubeScheduler, []string{KubeBinDir + "/kube-scheduler"}},
		{KubeProxy, []string{KubeBinDir + "/kube-proxy"}},
		{Kubelet, []string{KubeBinDir + "/kubelet"}},
		{Pause, []string{PausePath}},
	}
}

// DefaultList is what `talosctl image default` prints, one reference a line, in upstream
// v1.11's order: flannel, CoreDNS, etcd, the control plane, kube-proxy, kubelet, the installer
// and pause.
func DefaultList() []string {
	var out []string

	for _, img := range Default() {
		if img.Ref == Pause {
			out = append(out, Installer())
		}

		out = append(out, img.Ref)
	}

	return out
}
