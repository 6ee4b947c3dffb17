package configsupport

// Test packages the network rules name.
const (
	netCtrl  = "internal/machined/controllers/network."
	ksCtrl   = "internal/machined/controllers/kubespan."
	metalE2E = "internal/e2e/metal."
	ownTest  = "internal/configsupport."

	// udevEthernetTest boots one metal node with udev rules (a disk's link, a sysfs write) and
	// an EthernetConfig (channels and a feature of its virtio-net NIC).
	udevEthernetTest = metalE2E + "TestUdevRulesAndEthernetConfig"
)

// ownKernel is a field only a node on its own kernel (metal) honours: process and container
// nodes do not run the controllers that set links, addresses, routes, DHCP, VIPs or KubeSpan
// (their network is the provisioner's veth or the host's).
func ownKernel(path, test string) Rule {
	return Rule{
		Path: path, Test: test, On: []Node{Process, Container},
		Refused: "a process or container node does not set up its network from the config: its links and addresses are the provisioner's",
		Fix:     "remove it, or run the node on its own kernel (talosctl cluster create --provisioner qemu)",
	}
}

// notYet is a field this node does not implement (or has no test proving it) on any node.
func notYet(path, why, fix string) Rule {
	return Rule{Path: path, Refused: why, Fix: fix}
}

// networkRules covers machine.network and the network documents. machine.network.extraHostEntries
// and machine.network.interfaces[].dummy are left to their own rules: no rule here sits on an
// ancestor of theirs (machine.network, machine.network.interfaces[]).
var networkRules = append([]Rule{
	// The hostname: every provisioner names its nodes with it, process nodes too (their
	// hostname resource; the host's own name is left alone).
	{Path: "machine.network.hostname", Test: netCtrl + "TestHostnameSpec"},

	// Resolvers: a process node uses this machine's resolv.conf.
	{
		Path: "machine.network.nameservers", Test: netCtrl + "TestResolverHostDNS", On: []Node{Process},
		Refused: "a process node uses this machine's resolvers",
		Fix:     "remove it, or configure the resolvers of this machine; container and qemu nodes take it",
	},
	{
		Path: "machine.network.searchDomains", Test: netCtrl + "TestResolverSearchDomains", On: []Node{Process},
		Refused: "a process node uses this machine's resolvers",
		Fix:     "remove it, or set the search domains of this machine; container and qemu nodes take it",
	},
	{
		Path: "machine.network.extraHostEntries", Test: "internal/e2e/container.TestExtraHostEntriesFollowConfig", On: []Node{Process, Metal},
		Refused: "only a container node writes its own /etc/hosts yet (a process node shares this machine's; a metal node keeps its image's)",
		Fix:     "remove it, and use the cluster's DNS or addresses",
	},
	{Path: "machine.network.disableSearchDomain", NoEffect: "this node never adds its hostname's domain as a search domain, so there is none to disable"},

	// machine.network.interfaces[], field by field (dummy is another rule's).
	ownKernel("machine.network.interfaces[].interface", metalE2E+"TestNetworkFromConfig"),
	ownKernel("machine.network.interfaces[].addresses", metalE2E+"TestNetworkFromConfig"),
	ownKernel("machine.network.interfaces[].dummy", metalE2E+"TestNetworkFromConfig"),
	ownKernel("machine.network.interfaces[].cidr", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].mtu", metalE2E+"TestNetworkFromConfig"),
	ownKernel("machine.network.interfaces[].routes", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].routes[].network", metalE2E+"TestNetworkFromConfig"),
	ownKernel("machine.network.interfaces[].routes[].gateway", metalE2E+"TestNetworkFromConfig"),
	ownKernel("machine.network.interfaces[].deviceSelector", netCtrl+"TestMatchesSelector"),
	ownKernel("machine.network.interfaces[].deviceSelector.hardwareAddr", netCtrl+"TestDeviceSelectorPicksTheLink"),
	ownKernel("machine.network.interfaces[].deviceSelector.permanentAddr", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].dhcp", netCtrl+"TestDHCP4FromTheConfig"),
	ownKernel("machine.network.interfaces[].dhcpOptions.routeMetric", netCtrl+"TestDHCP4FromTheConfig"),
	ownKernel("machine.network.interfaces[].dhcpOptions.ipv4", netCtrl+"TestDHCP6FromTheConfig"),
	ownKernel("machine.network.interfaces[].dhcpOptions.ipv6", netCtrl+"TestDHCP6FromTheConfig"),
	ownKernel("machine.network.interfaces[].dhcpOptions.duidv6", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].ignore", netCtrl+"TestDHCP4IgnoredLink"),

	// Bonds: the kernel gets the mode, link monitoring, members and the bonding options
	// (bondOptionRules).
	ownKernel("machine.network.interfaces[].bond.mode", metalE2E+"TestBondAndVLANFromConfig"),
	ownKernel("machine.network.interfaces[].bond.miimon", metalE2E+"TestBondAndVLANFromConfig"),
	ownKernel("machine.network.interfaces[].bond.deviceSelectors", metalE2E+"TestBondAndVLANFromConfig"),
	ownKernel("machine.network.interfaces[].bond.interfaces", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].bond.updelay", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].bond.downdelay", ownTest+"TestNetworkConfigSpecs"),

	ownKernel("machine.network.interfaces[].bridge", metalE2E+"TestBondAndVLANFromConfig"),
	ownKernel("machine.network.interfaces[].bridge.vlan.vlanFiltering", ownTest+"TestBridgeVLANFilteringAndWireguardMarkSpecs"),
	ownKernel("machine.network.interfaces[].bridgePort", netCtrl+"TestBridgeFromConfig"),

	// VLANs: <interface>.<vlanId> links with their own addresses, routes, DHCP and VIP.
	ownKernel("machine.network.interfaces[].vlans", ownTest+"TestNetworkConfigSpecs"),
	ownKernel("machine.network.interfaces[].vlans[].vlanId", metalE2E+"TestBondAndVLANFromConfig"),
	ownKernel("machine.network.interfaces[].vlans[].addresses", metalE2E+"TestBondAndVLANFromConfig"),
	ownKernel("machine.network.interfaces[].vlans[].vip.ip", netCtrl+"TestVIPFromTheConfig"),

	// WireGuard links: this host's kernel has none, the metal suite proves them on the node's.
	ownKernel("machine.network.interfaces[].wireguard", metalE2E+"TestClusterCreateQEMUWireguard"),
	ownKernel("machine.network.interfaces[].wireguard.firewallMark", ownTest+"TestBridgeVLANFilteringAndWireguardMarkSpecs"),

	// The shared address: elected through etcd; the cloud providers' APIs are not called.
	ownKernel("machine.network.interfaces[].vip.ip", metalE2E+"TestClusterCreateQEMUMachineDevices"),
	notYet("machine.network.interfaces[].vip.equinixMetal", "this node does not call Equinix Metal's API to move the shared address",
		"remove it; the node announces the VIP on its link by gratuitous ARP (vip.ip alone)"),
	notYet("machine.network.interfaces[].vip.hcloud", "this node does not call Hetzner Cloud's API to move the shared address",
		"remove it; the node announces the VIP on its link by gratuitous ARP (vip.ip alone)"),
	notYet("machine.network.interfaces[].vlans[].vip.equinixMetal", "this node does not call Equinix Metal's API to move the shared address",
		"remove it; the node announces the VIP on its link by gratuitous ARP (vip.ip alone)"),
	notYet("machine.network.interfaces[].vlans[].vip.hcloud", "this node does not call Hetzner Cloud's API to move the shared address",
		"remove it; the node announces the VIP on its link by gratuitous ARP (vip.ip alone)"),

	// KubeSpan: a WireGuard link in the node's own kernel.
	ownKernel("machine.network.kubespan", ownTest+"TestKubeSpanConfigFields"),
	ownKernel("machine.network.kubespan.enabled", metalE2E+"TestClusterCreateQEMUKubeSpan"),
	ownKernel("KubeSpanEndpointsConfig", ownTest+"TestKubeSpanConfigFields"),

	// The ingress firewall: in the node's own network namespace, never the host's.
	{
		Path: "NetworkRuleConfig", Test: netCtrl + "TestIngressFirewall", On: []Node{Process},
		Refused: "a process node shares this machine's network, which its firewall would filter",
		Fix:     "remove it, or run the node as a container or on its own kernel",
	},
	{
		Path: "NetworkDefaultActionConfig", Test: netCtrl + "TestIngressFirewall", On: []Node{Process},
		Refused: "a process node shares this machine's network, which its firewall would filter",
		Fix:     "remove it, or run the node as a container or on its own kernel",
	},

	// ethtool settings of the machine's NICs (network.EthernetController).
	ownKernel("EthernetConfig", udevEthernetTest),
}, bondOptionRules()...)

// bondOptions are the bonding options a node on its own kernel passes on when it makes the bond:
// TestBondOptionsFromConfig shows each reach the bond's spec, internal/netlink.TestBondNetlinkData the kernel's
// attribute the link controller sends; internal/e2e/metal.TestBondAndVLANFromConfig makes a
// bond on the node's kernel (with its mode and miimon).
var bondOptions = []string{
	"xmitHashPolicy", "lacpRate", "arpValidate", "arpAllTargets", "primary",
	"primaryReselect", "failOverMac", "adSelect", "arpInterval", "resendIgmp", "minLinks", "lpInterval",
	"packetsPerSlave", "numPeerNotif", "tlbDynamicLb", "allSlavesActive", "useCarrier", "adActorSysPrio",
	"adUserPortKey", "peerNotifyDelay",
}

func bondOptionRules() []Rule {
	var rules []Rule

	for _, o := range bondOptions {
		r := ownKernel("machine.network.interfaces[].bond."+o, "internal/netlink.TestBondNetlinkData")
		r.Fix += "; on its own kernel the bond is made with it (internal/e2e/metal.TestBondAndVLANFromConfig makes a bond there)"
		rules = append(rules, r)
	}

	// Upstream's own validation refuses these two (v1.11: "not supported"); its bond spec has no
	// field for them.
	for _, o := range []string{"arpIPTarget", "adActorSystem"} {
		rules = append(rules, notYet("machine.network.interfaces[].bond."+o, "upstream Talos does not support this bonding option either (its validation refuses it)",
			"remove it"))
	}

	return rules
}
