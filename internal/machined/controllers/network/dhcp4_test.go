package network_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
	"github.com/talos-go/talos/internal/testenv"
)

// dhcpServer is the qemu provisioner's DHCP server on the far end of a veth, in a network
// namespace of its own (so that its unicast answers cross the veth), counting renewals: DHCPv6
// when the spec has an IPv6 network, DHCPv4 otherwise.
type dhcpServer struct {
	srv      interface{ Close() error }
	renewals atomic.Int32
}

func startDHCPServer(t *testing.T, link string, spec vm.NetworkSpec) *dhcpServer {
	t.Helper()

	s := &dhcpServer{}
	tid, moved, ready, done := make(chan int, 1), make(chan struct{}), make(chan error, 1), make(chan struct{})

	// A thread of its own in a new network namespace: the server's socket is made there, and
	// the thread ends with its goroutine (never unlocked).
	go func() {
		runtime.LockOSThread()

		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			tid <- -1
			ready <- err

			return
		}

		tid <- unix.Gettid()
		<-moved

		// ip, started from this thread, runs in its namespace.
		setup := [][]string{{"link", "set", "lo", "up"}, {"link", "set", link, "up"}}
		if spec.Gateway.IsValid() {
			setup = append(setup, []string{"addr", "add", spec.Gateway.String(), "dev", link})
		}

		for _, args := range setup {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				ready <- fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)

				return
			}
		}

		var (
			srv interface {
				Serve() error
				Close() error
			}
			err error
		)

		if spec.IPv6.IsValid() {
			var handler server6.Handler
			if handler, err = spec.DHCP6Handler(); err == nil {
				srv, err = server6.NewServer(link, nil, func(conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6) {
					if msg, err := m.GetInnerMessage(); err == nil && msg.MessageType == dhcpv6.MessageTypeRenew {
						s.renewals.Add(1)
					}

					handler(conn, peer, m)
				})
			}
		} else {
			srv, err = server4.NewServer(link, nil, func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
				if m.MessageType() == dhcpv4.MessageTypeRequest && !m.ClientIPAddr.IsUnspecified() {
					s.renewals.Add(1)
				}

				spec.HandleDHCP(conn, peer, m)
			})
		}

		if err != nil {
			ready <- err

			return
		}

		s.srv = srv
		ready <- nil

		srv.Serve() // ends when the test closes it

		// The namespace (and the veth with it) goes with this thread: it stays until the test
		// ends, a closed server is only a silent network.
		<-done
	}()

	id := <-tid
	if id < 0 {
		t.Fatal(<-ready)
	}

	ns := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), id)
	if out, err := exec.Command("ip", "link", "set", link, "netns", ns).CombinedOutput(); err != nil {
		t.Fatalf("moving %s into the server's namespace: %v: %s", link, err, out)
	}

	close(moved)

	if err := <-ready; err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		s.srv.Close()
		close(done)
	})

	return s
}

// clientLink makes a veth pair (root only): client, the node's link, and server's end for
// startDHCPServer; it returns the client's hardware address.
func clientLink(t *testing.T, client, server string) net.HardwareAddr {
	t.Helper()

	if os.Getuid() != 0 {
		t.Skip("needs root to add a link and a network namespace: run as root under nsrun")
	}

	if out, err := exec.Command("ip", "link", "add", client, "type", "veth", "peer", "name", server).CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}

	t.Cleanup(func() { exec.Command("ip", "link", "del", client).Run() })

	iface, err := net.InterfaceByName(client)
	if err != nil {
		t.Fatal(err)
	}

	return iface.HardwareAddr
}

// DHCP4Controller takes a lease on the link, publishes it as an address, a default route and
// resolvers that SpecController sets, renews it at half its time, and, when the server is gone
// and the lease runs out, takes the address away.
func TestDHCP4KeepsTheLease(t *testing.T) {
	mac := clientLink(t, "dhcp0", "dhcp1")

	server := startDHCPServer(t, "dhcp1", vm.NetworkSpec{
		Bridge: "dhcp1", Gateway: netip.MustParsePrefix("10.9.5.1/24"), Nameservers: []netip.Addr{netip.MustParseAddr("10.9.5.53")},
		Nodes:     []vm.NodeLease{{Name: "node-1", MAC: mac.String(), Address: netip.MustParseAddr("10.9.5.2")}},
		LeaseTime: 6 * time.Second,
	})

	if out, err := exec.Command("ip", "link", "set", "dhcp0", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set up: %v: %s", err, out)
	}

	env := ctest.Start(t, &networkctrl.DHCP4Controller{Links: []string{"dhcp0"}, Retry: time.Second}, &networkctrl.SpecController{})

	ctest.AssertResource(env, "operator/dhcp0/10.9.5.2/24", func(r *network.AddressSpec, a *assert.Assertions) {
		a.Equal(network.ConfigOperator, r.TypedSpec().ConfigLayer)
	})
	ctest.AssertResource(env, "operator/dhcp4/dhcp0", func(r *network.ResolverSpec, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr("10.9.5.53")}, r.TypedSpec().DNSServers)
	})

	ipOut := func(args ...string) string {
		out, _ := exec.Command("ip", args...).CombinedOutput()

		return string(out)
	}

	testenv.WaitFor(t, "the leased address and the default route on dhcp0", 10*time.Second, func() error {
		addrs, routes := ipOut("-o", "addr", "show", "dhcp0"), ipOut("route", "show", "default")
		if !strings.Contains(addrs, "10.9.5.2/24") || !strings.Contains(routes, "via 10.9.5.1 dev dhcp0") || !strings.Contains(routes, "metric 1024") {
			return fmt.Errorf("addresses:\n%sroutes:\n%s", addrs, routes)
		}

		return nil
	})

	// A 6 s lease is renewed every 3 s.
	testenv.WaitFor(t, "two renewals", 20*time.Second, func() error {
		if n := server.renewals.Load(); n < 2 {
			return fmt.Errorf("%d renewals", n)
		}

		return nil
	})

	ctest.AssertIDs[*network.AddressSpec](env, "operator/dhcp0/10.9.5.2/24")

	// No server: the lease runs out, and its address goes.
	server.srv.Close()

	testenv.WaitFor(t, "the address gone with the lease", 30*time.Second, func() error {
		if addrs := ipOut("-o", "addr", "show", "dhcp0"); strings.Contains(addrs, "10.9.5.2") {
			return fmt.Errorf("still:\n%s", addrs)
		}

		return nil
	})

	ctest.AssertNoResource[*network.AddressSpec](env, "operator/dhcp0/10.9.5.2/24")
}

// `dhcp: true` in the config makes a DHCP4 operator spec, and DHCP4Controller keeps a lease on
// that link, its default route with the config's metric; when the config drops it, the lease's
// address and route go.
func TestDHCP4FromTheConfig(t *testing.T) {
	mac := clientLink(t, "cdhcp0", "cdhcp1")

	startDHCPServer(t, "cdhcp1", vm.NetworkSpec{
		Bridge: "cdhcp1", Gateway: netip.MustParsePrefix("10.9.4.1/24"),
		Nodes: []vm.NodeLease{{Name: "node-1", MAC: mac.String(), Address: netip.MustParseAddr("10.9.4.2")}},
	})

	env := ctest.Start(t, &networkctrl.ConfigSpecController{}, &networkctrl.DHCP4Controller{Retry: time.Second}, &networkctrl.SpecController{})

	dhcp := &v1alpha1.Device{DeviceInterface: "cdhcp0", DeviceDHCP: new(true), DeviceDHCPOptions: &v1alpha1.DHCPOptions{DHCPRouteMetric: 2048}}
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(dhcp)))

	ctest.AssertResource(env, "dhcp4/cdhcp0", func(r *network.OperatorSpec, a *assert.Assertions) {
		a.Equal(network.OperatorDHCP4, r.TypedSpec().Operator)
		a.EqualValues(2048, r.TypedSpec().DHCP4.RouteMetric)
	})
	ctest.AssertIDs[*network.AddressSpec](env, "operator/cdhcp0/10.9.4.2/24")

	ipOut := func(args ...string) string {
		out, _ := exec.Command("ip", args...).CombinedOutput()

		return string(out)
	}

	testenv.WaitFor(t, "the lease's address and route", 10*time.Second, func() error {
		addrs, routes := ipOut("-o", "addr", "show", "cdhcp0"), ipOut("route", "show", "default")
		if !strings.Contains(addrs, "10.9.4.2/24") || !strings.Contains(routes, "via 10.9.4.1 dev cdhcp0") || !strings.Contains(routes, "metric 2048") {
			return fmt.Errorf("addresses:\n%sroutes:\n%s", addrs, routes)
		}

		return nil
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker))

	testenv.WaitFor(t, "the address gone with the config's DHCP", 10*time.Second, func() error {
		if addrs := ipOut("-o", "addr", "show", "cdhcp0"); strings.Contains(addrs, "10.9.4.2") {
			return fmt.Errorf("still:\n%s", addrs)
		}

		return nil
	})
}
