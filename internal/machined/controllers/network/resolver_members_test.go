package network_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

func member(id, hostname string, addrs ...string) *cluster.Member {
	m := cluster.NewMember(cluster.NamespaceName, id)
	m.TypedSpec().NodeID, m.TypedSpec().Hostname = id, hostname

	for _, a := range addrs {
		m.TypedSpec().Addresses = append(m.TypedSpec().Addresses, netip.MustParseAddr(a))
	}

	return m
}

// answerOf asks the host DNS on 127.0.0.53 for name and returns the address answered ("" for
// none).
func answerOf(name string, qtype uint16) (string, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)

	resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, "127.0.0.53:53")
	if err != nil {
		return "", err
	}

	if len(resp.Answer) == 0 {
		return "", nil
	}

	switch rr := resp.Answer[0].(type) {
	case *dns.A:
		return rr.A.String(), nil
	case *dns.AAAA:
		return rr.AAAA.String(), nil
	}

	return "", fmt.Errorf("answer %v", resp.Answer[0])
}

// TestResolverMemberNames: with machine.features.hostDNS.resolveMemberNames the host DNS
// answers A and AAAA queries for the cluster members' hostnames and node names with their
// addresses (members joining are answered for too); without it the same names go to the
// node's resolver.
func TestResolverMemberNames(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root in a network namespace of its own (port 53)")
	}

	serveUpstream(t) // answers every A query with 192.0.2.7

	env := ctest.Start(t, &networkctrl.ResolverController{Root: t.TempDir()})

	config := func(resolveMembers bool) func(*v1alpha1.Config) {
		return func(c *v1alpha1.Config) {
			c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NameServers: []string{"127.0.0.2"}}
			c.MachineConfig.MachineFeatures.HostDNSSupport = &v1alpha1.HostDNSConfig{HostDNSEnabled: new(true), HostDNSResolveMemberNames: new(resolveMembers)}
		}
	}

	waitAnswer := func(name string, qtype uint16, want string) {
		t.Helper()

		testenv.WaitFor(t, fmt.Sprintf("%s %s answered with %s", name, dns.TypeToString[qtype], want), 10*time.Second, func() error {
			got, err := answerOf(name, qtype)
			if err == nil && got != want {
				err = fmt.Errorf("answered %q", got)
			}

			return err
		})
	}

	env.Create(member("cp1", "cp1.example.org", "10.5.0.2", "fd00::2"))
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, config(true)))

	ctest.AssertResource(env, network.HostDNSConfigID, func(r *network.HostDNSConfig, a *assert.Assertions) {
		a.True(r.TypedSpec().ResolveMemberNames)
	})

	waitAnswer("cp1.example.org.", dns.TypeA, "10.5.0.2")
	waitAnswer("cp1.", dns.TypeA, "10.5.0.2")
	waitAnswer("cp1.", dns.TypeAAAA, "fd00::2")
	waitAnswer("other.example.org.", dns.TypeA, "192.0.2.7")

	// A member that joins is answered for.
	env.Create(member("w1", "worker1", "10.5.0.3"))
	waitAnswer("worker1.", dns.TypeA, "10.5.0.3")

	// Off: the members' names go to the resolver like any other.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, config(false)))
	ctest.AssertResource(env, network.HostDNSConfigID, func(r *network.HostDNSConfig, a *assert.Assertions) {
		a.False(r.TypedSpec().ResolveMemberNames)
	})
	waitAnswer("cp1.example.org.", dns.TypeA, "192.0.2.7")
}
