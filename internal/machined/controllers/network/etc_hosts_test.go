package network_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// TestEtcHostsFollowsExtraHostEntries: /etc/hosts lists the node's names and
// machine.network.extraHostEntries, and follows a config change and a hostname change.
func TestEtcHostsFollowsExtraHostEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	env := ctest.Start(t, &networkctrl.EtcHostsController{Address: "10.5.0.2", Path: path})

	withHosts := func(hosts ...*v1alpha1.ExtraHost) func(*v1alpha1.Config) {
		return func(c *v1alpha1.Config) {
			if c.MachineConfig.MachineNetwork == nil {
				c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{}
			}

			c.MachineConfig.MachineNetwork.ExtraHostEntries = hosts
		}
	}

	status := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	status.TypedSpec().Hostname = "worker-1"
	env.Create(status)
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withHosts(&v1alpha1.ExtraHost{HostIP: "192.168.1.100", HostAliases: []string{"example", "example.domain.tld"}})))

	waitContent(t, path, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.5.0.2\tworker-1\n192.168.1.100\texample example.domain.tld\n")

	// A changed config replaces the entries; a domain joins the node's names.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, withHosts(&v1alpha1.ExtraHost{HostIP: "fd00::5", HostAliases: []string{"registry.lan"}})))
	ctest.Update(env, status, func(s *network.HostnameStatus) error { s.TypedSpec().Domainname = "cluster.lan"; return nil })
	waitContent(t, path, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.5.0.2\tworker-1.cluster.lan\tworker-1\nfd00::5\tregistry.lan\n")

	// Without the config the entries are gone.
	env.Destroy(configres.NewMachineConfig(nil))
	waitContent(t, path, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.5.0.2\tworker-1.cluster.lan\tworker-1\n")
}

func waitContent(t *testing.T, path, want string) {
	t.Helper()

	var got []byte

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got, _ = os.ReadFile(path); string(got) == want { // absent until written
			return
		}
	}

	t.Fatalf("%s is\n%s\nwant\n%s", path, got, strings.TrimSpace(want))
}
