package provision

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// The values of --with-firewall: the ingress firewall's default action.
const (
	FirewallAccept = "accept"
	FirewallBlock  = "block"
)

// firewallPatches are --with-firewall's config patches, as upstream's: the default action, and
// rules that let the cluster work under block. Control planes: apid and the Kubernetes API from
// anywhere, kubelet, trustd and the CNI's VXLAN from the cluster network (not its gateway, the
// host), etcd from the control planes. Workers: apid, kubelet and VXLAN from the cluster network.
// With KubeSpan, every node takes WireGuard from the cluster network.
func firewallPatches(action string, cidr netip.Prefix, controlPlanes []netip.Addr, kubeSpan bool) (cp, worker string) {
	gw := netip.PrefixFrom(Gateway(cidr).Addr(), 32)

	within := fmt.Sprintf("  - subnet: %s\n    except: %s\n", cidr.Masked(), gw)
	open := "  - subnet: 0.0.0.0/0\n  - subnet: ::/0\n"

	var cps strings.Builder
	for _, a := range controlPlanes {
		fmt.Fprintf(&cps, "  - subnet: %s\n", netip.PrefixFrom(a, a.BitLen()))
	}

	rule := func(name, protocol, ports, ingress string) string {
		return fmt.Sprintf("---\napiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: %s\nportSelector:\n  ports: [%s]\n  protocol: %s\ningress:\n%s", name, ports, protocol, ingress)
	}

	def := fmt.Sprintf("apiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: %s\n", action)
	vxlan := rule("cni-vxlan", "udp", "4789, 8472", within)

	cp = def + rule("kubelet-ingress", "tcp", "10250", within) + rule("apid-ingress", "tcp", "50000", open) +
		rule("trustd-ingress", "tcp", "50001", within) + rule("kubernetes-api-ingress", "tcp", "6443", open) +
		rule("etcd-ingress", "tcp", "2379-2380", cps.String()) + vxlan
	worker = def + rule("kubelet-ingress", "tcp", "10250", within) + rule("apid-ingress", "tcp", "50000", within) + vxlan

	if kubeSpan {
		ks := rule("kubespan-ingress", "udp", strconv.Itoa(constants.KubeSpanDefaultPort), within)
		cp, worker = cp+ks, worker+ks
	}

	return cp, worker
}
