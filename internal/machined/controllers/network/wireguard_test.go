package network_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

// machine.network.interfaces[].wireguard makes a WireGuard link in the kernel with the config's
// key, port and peers, and its address; a changed peer list is applied; the link goes with the
// config.
func TestWireguardFromTheConfig(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to add a link: run as root under nsrun")
	}

	// This host's kernel may have no WireGuard: the metal suite checks it on a node's own
	// kernel (TestClusterCreateQEMUWireguard).
	if out, err := exec.Command("ip", "link", "add", "wgprobe0", "type", "wireguard").CombinedOutput(); err != nil {
		t.Skipf("this kernel has no WireGuard: %s", out)
	}

	exec.Command("ip", "link", "del", "wgprobe0").Run()

	key, _ := wgtypes.GeneratePrivateKey()
	peer1, _ := wgtypes.GeneratePrivateKey()
	peer2, _ := wgtypes.GeneratePrivateKey()

	dev := func(peers ...wgtypes.Key) *v1alpha1.Device {
		wg := &v1alpha1.DeviceWireguardConfig{WireguardPrivateKey: key.String(), WireguardListenPort: 51999}
		for i, p := range peers {
			wg.WireguardPeers = append(wg.WireguardPeers, &v1alpha1.DeviceWireguardPeer{
				WireguardPublicKey: p.PublicKey().String(), WireguardEndpoint: fmt.Sprintf("127.0.0.%d:51111", i+2),
				WireguardAllowedIPs: []string{fmt.Sprintf("10.9.12.%d/32", i+2)}, WireguardPersistentKeepaliveInterval: 5 * time.Second,
			})
		}

		return &v1alpha1.Device{DeviceInterface: "wgtest0", DeviceAddresses: []string{"10.9.12.1/24"}, DeviceWireguardConfig: wg}
	}

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.SpecController{})
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, interfacesConfig(dev(peer1))))

	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { wg.Close() })

	check := func(peers ...wgtypes.Key) func() error {
		return func() error {
			d, err := wg.Device("wgtest0")
			if err != nil {
				return err
			}

			if d.PublicKey != key.PublicKey() || d.ListenPort != 51999 || len(d.Peers) != len(peers) {
				return fmt.Errorf("device: key %s, port %d, %d peers", d.PublicKey, d.ListenPort, len(d.Peers))
			}

			for i, p := range peers {
				got := d.Peers[i]
				if got.PublicKey != p.PublicKey() || len(got.AllowedIPs) != 1 || got.AllowedIPs[0].String() != fmt.Sprintf("10.9.12.%d/32", i+2) ||
					got.PersistentKeepaliveInterval != 5*time.Second || got.Endpoint.String() != fmt.Sprintf("127.0.0.%d:51111", i+2) {
					return fmt.Errorf("peer %d: %+v", i, got)
				}
			}

			ifi, err := net.InterfaceByName("wgtest0")
			if err != nil {
				return err
			}

			addrs, _ := ifi.Addrs()
			if len(addrs) != 1 || addrs[0].String() != "10.9.12.1/24" {
				return fmt.Errorf("addresses %v", addrs)
			}

			return nil
		}
	}

	testenv.WaitFor(t, "the WireGuard link as configured", 10*time.Second, check(peer1))

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, interfacesConfig(dev(peer1, peer2))))
	testenv.WaitFor(t, "the second peer", 10*time.Second, check(peer1, peer2))

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane))
	testenv.WaitFor(t, "the link gone", 10*time.Second, func() error {
		if _, err := net.InterfaceByName("wgtest0"); err == nil {
			return fmt.Errorf("still there")
		}

		return nil
	})
}
