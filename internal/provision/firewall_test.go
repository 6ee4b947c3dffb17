package provision

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
)

// --with-firewall's patches are valid config documents with upstream's rules.
func TestFirewallPatches(t *testing.T) {
	cps := []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("10.5.0.3")}
	cp, worker := firewallPatches(FirewallBlock, netip.MustParsePrefix("10.5.0.0/24"), cps, false)
	cpKS, workerKS := firewallPatches(FirewallBlock, netip.MustParsePrefix("10.5.0.0/24"), cps, true)

	for name, c := range map[string]struct {
		doc   string
		rules int
		want  []string
	}{
		"control plane": {cp, 6, []string{"etcd-ingress", "- subnet: 10.5.0.3/32", "except: 10.5.0.1/32", "ports: [2379-2380]"}},
		"worker":        {worker, 3, []string{"apid-ingress", "except: 10.5.0.1/32"}},
		// With KubeSpan: WireGuard's port from the cluster network too.
		"control plane, kubespan": {cpKS, 7, []string{"kubespan-ingress", "ports: [51820]\n  protocol: udp"}},
		"worker, kubespan":        {workerKS, 4, []string{"kubespan-ingress", "ports: [51820]\n  protocol: udp"}},
	} {
		cfg, err := configloader.NewFromBytes([]byte(c.doc))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, c.doc)
		}

		if cfg.NetworkRules().DefaultAction() != nethelpers.DefaultActionBlock || len(cfg.NetworkRules().Rules()) != c.rules {
			t.Errorf("%s: default %v, %d rules; want block and %d", name, cfg.NetworkRules().DefaultAction(), len(cfg.NetworkRules().Rules()), c.rules)
		}

		for _, w := range c.want {
			if !strings.Contains(c.doc, w) {
				t.Errorf("%s: no %q in\n%s", name, w, c.doc)
			}
		}
	}
}
