// Command flannel-cni is the `flannel` CNI plugin of the node image (/opt/cni/bin/flannel). It
// reads the subnet flanneld leased for this node from /run/flannel/subnet.env, writes a
// `bridge` configuration with `host-local` addresses from that subnet, and delegates to those
// plugins, as flannel's own plugin does.
//
// Why our own: upstream Talos' default CNI is flannel, the kube-flannel DaemonSet whose
// configuration names the `flannel` plugin, with that plugin shipped in the node's
// /opt/cni/bin. flanneld itself builds here from github.com/flannel-io/flannel, but the plugin's
// module (github.com/flannel-io/cni-plugin) is not served by the module proxy. The plugin is a
// small translation from subnet.env to a bridge configuration, so writing it on
// github.com/containernetworking/cni keeps the cluster standard: the same DaemonSet, the same
// conflist, the same files on the node, with the bridge and host-local plugins we already build.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck}, version.All, "flannel CNI plugin (talos-go)")
}
