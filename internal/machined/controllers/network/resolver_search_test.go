package network_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

// TestResolverSearchDomains: machine.network.searchDomains is the search line of the node's and
// the pods' resolv.conf and the resolver status's search domains; an entry that is not a domain
// name is left out; without it there is no search line.
func TestResolverSearchDomains(t *testing.T) {
	root := t.TempDir()
	hostConf, podConf := filepath.Join(root, networkctrl.HostResolvConf), filepath.Join(root, networkctrl.PodResolvConf)
	env := ctest.Start(t, &networkctrl.ResolverController{Root: root})

	withSearch := func(domains ...string) func(*v1alpha1.Config) {
		return func(c *v1alpha1.Config) {
			c.MachineConfig.MachineFeatures.HostDNSSupport = &v1alpha1.HostDNSConfig{HostDNSEnabled: new(false)}
			c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NameServers: []string{"10.9.9.9"}, Searches: domains}
		}
	}

	files := func(want string) {
		t.Helper()

		testenv.WaitFor(t, "resolv.conf "+want, 10*time.Second, func() error {
			if h, p := readFile(t, hostConf), readFile(t, podConf); h != want || p != want {
				return fmt.Errorf("host %q, pods %q", h, p)
			}

			return nil
		})
	}

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withSearch("corp.example", "bad entry", "lab.example")))

	files("nameserver 10.9.9.9\nsearch corp.example lab.example\n")
	ctest.AssertResource(env, network.ResolverID, func(r *network.ResolverStatus, a *assert.Assertions) {
		a.Equal([]string{"corp.example", "lab.example"}, r.TypedSpec().SearchDomains)
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withSearch()))

	files("nameserver 10.9.9.9\n")
	ctest.AssertResource(env, network.ResolverID, func(r *network.ResolverStatus, a *assert.Assertions) {
		a.Empty(r.TypedSpec().SearchDomains)
	})
}
