package imager

import "github.com/talos-go/talos/internal/images"

// Component is one program the node image carries, at the version this build pins.
type Component struct {
	Name, Version string
}

// Components are the programs the node image carries besides machined and etcd: the runtime
// always, Kubernetes and its add-ons when the image carries them. machined publishes them as
// its SBOMItems; the versions are the ones rootfs builds with.
func Components(kubernetes bool) []Component {
	list := []Component{{"containerd", containerdVer}, {"runc", runcVer}, {"cni-plugins", cniVer}}

	if kubernetes {
		list = append(list, Component{"kubernetes", images.KubernetesVersion}, Component{"coredns", images.CoreDNSVersion},
			Component{"flannel", images.FlannelVersion}, Component{"pause", images.PauseVersion})
	}

	return list
}
