package secrets_test

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

func osRoot(ips []string, names ...string) *secrets.OSRoot {
	root := secrets.NewOSRoot(secrets.OSRootID)
	for _, ip := range ips {
		root.TypedSpec().CertSANIPs = append(root.TypedSpec().CertSANIPs, netip.MustParseAddr(ip))
	}

	root.TypedSpec().CertSANDNSNames = names

	return root
}

func TestAPICertSANs(t *testing.T) {
	env := ctest.Start(t, secretsctrl.NewAPICertSANsController())

	assertSANs := func(fqdn string, ips []string, names []string) {
		t.Helper()

		ctest.AssertResource(env, secrets.CertSANAPIID, func(r *secrets.CertSAN, a *assert.Assertions) {
			got := make([]string, 0, len(r.TypedSpec().IPs))
			for _, ip := range r.TypedSpec().IPs {
				got = append(got, ip.String())
			}

			a.Equal(ips, got)
			a.Equal(names, r.TypedSpec().DNSNames)
			a.Equal(fqdn, r.TypedSpec().FQDN)
		})
	}

	// The root alone is not enough: the hostname and the addresses come first.
	root := osRoot([]string{"10.0.0.50"}, "api.example.org")
	env.Create(root)
	env.Create(node("node1", "10.0.0.2", "10.0.0.1")...)

	assertSANs("node1", []string{"10.0.0.1", "10.0.0.2", "10.0.0.50"}, []string{"api.example.org", "node1"})

	// A domain adds the FQDN; names follow the hostname.
	ctest.Update(env, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname, r.TypedSpec().Domainname = "node2", "example.org"

		return nil
	})
	assertSANs("node2.example.org", []string{"10.0.0.1", "10.0.0.2", "10.0.0.50"}, []string{"api.example.org", "node2", "node2.example.org"})

	// Changed certSANs and addresses replace the old ones.
	ctest.Update(env, root, func(r *secrets.OSRoot) error {
		*r.TypedSpec() = *osRoot(nil, "other.example.org").TypedSpec()

		return nil
	})
	ctest.Update(env, network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID), func(r *network.NodeAddress) error {
		r.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("fd00::2/128")}

		return nil
	})
	assertSANs("node2.example.org", []string{"fd00::2"}, []string{"node2", "node2.example.org", "other.example.org"})

	// The root gone, the names go.
	env.Destroy(root)
	ctest.AssertNoResource[*secrets.CertSAN](env, secrets.CertSANAPIID)
}
