package network_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

// firewallConfig is a config of only the firewall's documents.
func firewallConfig(t *testing.T, docs string) *configres.MachineConfig {
	t.Helper()

	cfg, err := configloader.NewFromBytes([]byte(docs))
	if err != nil {
		t.Fatal(err)
	}

	return configres.NewMachineConfig(cfg)
}

const blockWithRules = `apiVersion: v1alpha1
kind: NetworkDefaultActionConfig
ingress: block
---
apiVersion: v1alpha1
kind: NetworkRuleConfig
name: web
portSelector:
  ports: [8080, 9000-9001]
  protocol: tcp
ingress:
  - subnet: 10.9.10.0/24
    except: 10.9.10.3/32
  - subnet: fd00:10::/64
`

// dialFrom connects to addr from the network namespace at nsPath, from the source address
// (if any), within a second.
func dialFrom(nsPath, addr string, source ...string) error {
	return netnstest.In(nsPath, func() error {
		d := net.Dialer{Timeout: time.Second}
		if len(source) > 0 {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source[0])}
		}

		c, err := d.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}

		return err
	})
}

// The ingress firewall from the config, in the kernel: with block, a peer reaches the port a
// rule allows from its subnet and not another (its packets dropped: the connection times out);
// an excepted address does not reach the allowed port either; back to accept, the table goes.
func TestIngressFirewall(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: nftables, a veth and a network namespace (run as root under nsrun)")
	}

	peer := fmt.Sprintf("fwpeer%d", os.Getpid())

	for _, args := range [][]string{
		{"netns", "add", peer},
		{"link", "add", "fw0", "type", "veth", "peer", "name", "fw1", "netns", peer},
		{"addr", "add", "10.9.10.1/24", "dev", "fw0"}, {"link", "set", "fw0", "up"},
		{"-n", peer, "addr", "add", "10.9.10.2/24", "dev", "fw1"}, {"-n", peer, "addr", "add", "10.9.10.3/24", "dev", "fw1"},
		{"-n", peer, "link", "set", "fw1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	t.Cleanup(func() {
		exec.Command("ip", "link", "del", "fw0").Run()
		exec.Command("ip", "netns", "del", peer).Run()
	})

	for _, port := range []string{"8080", "8081"} {
		l, err := net.Listen("tcp", "10.9.10.1:"+port)
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { l.Close() })

		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}

				c.Close()
			}
		}()
	}

	nsPath := "/run/netns/" + peer

	// The veth just came up: on a busy machine the first packets may take a while.
	testenv.WaitFor(t, "the peer reaching port 8081 before the firewall", 10*time.Second, func() error {
		return dialFrom(nsPath, "10.9.10.1:8081")
	})

	env := ctest.Start(t, &networkctrl.NfTablesChainConfigController{}, &networkctrl.NfTablesChainController{})
	env.Put(firewallConfig(t, blockWithRules))

	ctest.AssertResource(env, networkctrl.IngressChainID, func(r *network.NfTablesChain, a *assert.Assertions) {
		a.Equal(nethelpers.VerdictDrop, r.TypedSpec().Policy)
		a.Equal(nethelpers.ChainHookInput, r.TypedSpec().Hook)
	})

	testenv.WaitFor(t, "the firewall dropping the port no rule allows", 10*time.Second, func() error {
		if err := dialFrom(nsPath, "10.9.10.1:8081"); err == nil || !strings.Contains(err.Error(), "timeout") {
			return fmt.Errorf("port 8081: %w, want a timeout", err)
		}

		return nil
	})

	if err := dialFrom(nsPath, "10.9.10.1:8080"); err != nil {
		t.Errorf("the allowed port from the allowed subnet: %v", err)
	}

	// From the excepted address (the peer's second one, bound as the source).
	if err := dialFrom(nsPath, "10.9.10.1:8080", "10.9.10.3"); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("the allowed port from the excepted address: %v, want a timeout", err)
	}

	env.Put(firewallConfig(t, "apiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n"))
	ctest.AssertNoResource[*network.NfTablesChain](env, networkctrl.IngressChainID)

	testenv.WaitFor(t, "the firewall gone", 10*time.Second, func() error {
		return dialFrom(nsPath, "10.9.10.1:8081")
	})
}
