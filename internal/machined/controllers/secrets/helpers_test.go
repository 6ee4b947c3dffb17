package secrets_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/require"
)

// testAddr is a loopback address of this test binary (127.83/16 is the secrets tests').
func testAddr(host int) string {
	return fmt.Sprintf("127.83.%d.%d", os.Getpid()%250+1, host)
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()

	block, _ := pem.Decode(data)
	require.NotNil(t, block, "no PEM certificate")

	crt, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)

	return crt
}

// node is what the network controllers publish about a node: its hostname and addresses.
func node(hostname string, addrs ...string) []resource.Resource {
	status := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	status.TypedSpec().Hostname = hostname

	accumulative := network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID)
	for _, a := range addrs {
		addr := netip.MustParseAddr(a)
		accumulative.TypedSpec().Addresses = append(accumulative.TypedSpec().Addresses, netip.PrefixFrom(addr, addr.BitLen()))
	}

	return []resource.Resource{status, accumulative}
}

func withEndpoint(host string) func(*v1alpha1.Config) {
	return func(c *v1alpha1.Config) {
		u := *c.ClusterConfig.ControlPlane.Endpoint.URL
		u.Host = net.JoinHostPort(host, "6443")
		c.ClusterConfig.ControlPlane.Endpoint.URL = &u
	}
}

func withCertSANs(sans ...string) func(*v1alpha1.Config) {
	return func(c *v1alpha1.Config) { c.MachineConfig.MachineCertSANs = sans }
}
