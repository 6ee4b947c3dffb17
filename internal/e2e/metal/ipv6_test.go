package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// --ipv6: the cluster network is dual-stack. The network process advertises the IPv6 network
// derived from --cidr (fd74:616c:a05:1100::/64 for 10.5.17.0/24, as upstream's) on the bridge
// and leases each node its ::N over DHCPv6 (the config's dhcpOptions.ipv6 on the virtio link);
// `cluster show` lists it, apid answers there (its certificate names it), and Kubernetes'
// subnets are dual-stack.
func TestClusterCreateQEMUDualStack(t *testing.T) {
	_, cli, _ := qemuCluster(t, "qemu-v6")

	const cidr, gateway, node, node6 = "10.5.17.0/24", "10.5.17.1", "10.5.17.2", "fd74:616c:a05:1100::2"

	cli.Must(t, oneNodeCluster("qemu-v6", cidr, gateway, "--ipv6", "--with-uefi=false", "--with-bootloader=false", "--disk-preallocate=false")...)

	if out := cli.Must(t, "cluster", "show", "--name", "qemu-v6"); !strings.Contains(out, node+","+node6) {
		t.Errorf("cluster show does not list the node's IPv6 address:\n%s", out)
	}

	testenv.WaitFor(t, "the node's IPv6 address", 3*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "get", "addresses")
		if code != 0 || !strings.Contains(out, "eth0/"+node6+"/128") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	// Over IPv6 from the host: the node's certificate names the address once it has it.
	testenv.WaitFor(t, "apid over IPv6", 2*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-e", node6, "-n", node6, "version")
		if code != 0 || !strings.Contains(out, "Tag:") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	if out := cli.Must(t, "-n", node, "get", "machineconfig", "-o", "yaml"); !strings.Contains(out, "fc00:db8:10::/56") || !strings.Contains(out, "fc00:db8:20::/112") {
		t.Errorf("the pod and service subnets are not dual-stack:\n%s", out)
	}
}

// --ipv4=false --ipv6: an IPv6-only cluster. The bridge has only its IPv6 address; the node's
// boot stage leases fd74:616c:a05:1200::2 over DHCPv6 (no DHCPv4 answers) and fetches its config
// over IPv6, machined keeps the lease, etcd and apid run on that address, the talosconfig's
// endpoint is it, the node has no IPv4 address, eth0 accepts router advertisements even when
// forwarding (accept_ra 2), and Kubernetes' subnets are IPv6 only.
func TestClusterCreateQEMUIPv6Only(t *testing.T) {
	_, cli, _ := qemuCluster(t, "qemu-v6only")

	const cidr, gateway6, node = "10.5.18.0/24", "fd74:616c:a05:1200::1", "fd74:616c:a05:1200::2"

	out := cli.Must(t, oneNodeCluster("qemu-v6only", cidr, gateway6, "--ipv4=false", "--ipv6", "--with-uefi=false", "--with-bootloader=false", "--disk-preallocate=false")...)
	if !strings.Contains(out, "IPv6-only") {
		t.Errorf("cluster create does not say the cluster is IPv6-only:\n%s", out)
	}

	if out := cli.Must(t, "cluster", "show", "--name", "qemu-v6only"); !strings.Contains(out, node) || strings.Contains(out, "10.5.18.") {
		t.Errorf("cluster show: want the node's IPv6 address only:\n%s", out)
	}

	if out := cli.Must(t, "config", "info"); !strings.Contains(out, node) {
		t.Errorf("the talosconfig's endpoint is not the node's IPv6 address:\n%s", out)
	}

	// The default endpoint and node: the talosconfig's.
	testenv.WaitFor(t, "etcd on the IPv6 address", 4*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "etcd", "members")
		if code != 0 || !strings.Contains(out, "https://["+node+"]:2380") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	out = cli.Must(t, "get", "addresses")
	if !strings.Contains(out, "eth0/"+node+"/128") {
		t.Errorf("the node's DHCPv6 address is not on eth0:\n%s", out)
	}

	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "eth0/") && !strings.Contains(line, "eth0/f") {
			t.Errorf("an address that is not IPv6 on eth0: %s", line)
		}
	}

	if out := cli.Must(t, "get", "operatorspecs"); !strings.Contains(out, "dhcp6/eth0") || strings.Contains(out, "dhcp4/eth0") {
		t.Errorf("want DHCPv6 only on eth0:\n%s", out)
	}

	// The router's advertisements stay accepted if Kubernetes turns forwarding on.
	if out := cli.Must(t, "read", "/proc/sys/net/ipv6/conf/eth0/accept_ra"); strings.TrimSpace(out) != "2" {
		t.Errorf("eth0's accept_ra is %q, want 2", out)
	}

	if out := cli.Must(t, "get", "machineconfig", "-o", "yaml"); !strings.Contains(out, "fc00:db8:10::/56") || strings.Contains(out, "10.244.0.0/16") {
		t.Errorf("the pod subnets are not IPv6 only:\n%s", out)
	}
}
