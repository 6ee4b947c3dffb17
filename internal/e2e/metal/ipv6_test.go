package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// --ipv6: the cluster network is dual-stack. The network process advertises the IPv6 network
// derived from --cidr (fd74:616c:a05:1100::/64 for 10.5.17.0/24, as upstream's) on the bridge;
// the node's kernel makes its address of it and its MAC (SLAAC), `cluster show` lists it, apid
// answers there (its certificate names it), and Kubernetes' subnets are dual-stack.
func TestClusterCreateQEMUDualStack(t *testing.T) {
	_, cli, _ := qemuCluster(t, "qemu-v6")

	const cidr, gateway, node, node6 = "10.5.17.0/24", "10.5.17.1", "10.5.17.2", "fd74:616c:a05:1100:5054:ff:fe05:1102"

	cli.Must(t, oneNodeCluster("qemu-v6", cidr, gateway, "--ipv6", "--with-uefi=false", "--with-bootloader=false", "--disk-preallocate=false")...)

	if out := cli.Must(t, "cluster", "show", "--name", "qemu-v6"); !strings.Contains(out, node+","+node6) {
		t.Errorf("cluster show does not list the node's IPv6 address:\n%s", out)
	}

	testenv.WaitFor(t, "the node's IPv6 address", 3*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "get", "addresses")
		if code != 0 || !strings.Contains(out, "eth0/"+node6+"/64") {
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
