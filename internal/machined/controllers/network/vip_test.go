package network_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/testenv"
)

// startEtcd runs a real single-member etcd on loopback (plain HTTP: the test's only) and
// returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()

	bin := testenv.EtcdBinary(t)
	dir := t.TempDir()
	client, peer := "http://127.0.0.1:23790", "http://127.0.0.1:23800"

	cmd := exec.Command(bin, "--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default="+peer)

	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}

	cmd.Stdout, cmd.Stderr = log, log

	if err = cmd.Start(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})

	return client
}

// An ARP listener on link: it reports the sender addresses of the ARP requests it sees.
func listenARP(t *testing.T, link string) <-chan netip.Addr {
	t.Helper()

	ifi, err := net.InterfaceByName(link)
	if err != nil {
		t.Fatal(err)
	}

	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		t.Fatal(err)
	}

	if err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { unix.Close(fd) })

	senders := make(chan netip.Addr, 16)

	go func() {
		buf := make([]byte, 1500)

		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				return
			}

			// Ethernet header (14), then ARP: the sender's IPv4 address at 14+14.
			if n >= 42 && buf[12] == 0x08 && buf[13] == 0x06 {
				select {
				case senders <- netip.AddrFrom4([4]byte(buf[28:32])):
				default:
				}
			}
		}
	}()

	return senders
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Two control planes campaign for one VIP through a real etcd: one holds it (an operator
// address spec on its link) and announces it with gratuitous ARP, the other does not; when the
// holder's VIP goes from its config it resigns and the other takes the address.
func TestVIPElection(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: a veth and a packet socket (run as root under nsrun)")
	}

	for _, args := range [][]string{{"link", "add", "vip0", "type", "veth", "peer", "name", "vip1"}, {"link", "set", "vip0", "up"}, {"link", "set", "vip1", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	t.Cleanup(func() { exec.Command("ip", "link", "del", "vip0").Run() })

	arps := listenARP(t, "vip1")
	url := startEtcd(t)

	etcdClient := func(context.Context) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	}

	vip := netip.MustParseAddr("10.9.7.50")
	spec := network.OperatorSpecSpec{Operator: network.OperatorVIP, LinkName: "vip0", RequireUp: true,
		VIP: network.VIPOperatorSpec{IP: vip, GratuitousARP: true}, ConfigLayer: network.ConfigMachineConfiguration}

	node := func(name string) (*ctest.Env, *network.OperatorSpec) {
		env := ctest.Start(t, &networkctrl.VIPController{Etcd: etcdClient, Hostname: func() string { return name }, SessionTTL: 5, Retry: 200 * time.Millisecond})
		op := network.NewOperatorSpec(network.NamespaceName, "vip/vip0")
		*op.TypedSpec() = spec

		return env, op
	}

	const id = "operator/vip0/10.9.7.50/32"

	a, aOp := node("cp-1")
	a.Create(aOp)

	ctest.AssertResource(a, id, func(r *network.AddressSpec, as *assert.Assertions) {
		as.Equal(netip.MustParsePrefix("10.9.7.50/32"), r.TypedSpec().Address)
		as.Equal("vip0", r.TypedSpec().LinkName)
		as.Equal(network.ConfigOperator, r.TypedSpec().ConfigLayer)
	})

	select {
	case sender := <-arps:
		if sender != vip {
			t.Errorf("an ARP announcement from %s, want %s", sender, vip)
		}
	case <-time.After(10 * time.Second):
		t.Error("no gratuitous ARP for the VIP on the link")
	}

	b, bOp := node("cp-2")
	b.Create(bOp)

	// The second node campaigns (its candidacy is in etcd, behind the first's) and waits: the
	// address stays with the first.
	cli, err := etcdClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	testenv.WaitFor(t, "cp-2 campaigning", 30*time.Second, func() error {
		resp, err := cli.Get(t.Context(), "/talos/vip/"+vip.String()+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return err
		}

		var who []string
		for _, kv := range resp.Kvs {
			who = append(who, string(kv.Value))
		}

		if !slices.Equal(who, []string{"cp-1", "cp-2"}) {
			return fmt.Errorf("candidates in order: %v", who)
		}

		return nil
	})

	ctest.AssertNoResource[*network.AddressSpec](b, id)

	a.Destroy(aOp)

	ctest.AssertNoResource[*network.AddressSpec](a, id)
	ctest.AssertResource(b, id, func(r *network.AddressSpec, as *assert.Assertions) {
		as.Equal("vip0", r.TypedSpec().LinkName)
	})
}

// machine.network.interfaces[].vip (and a VLAN's) becomes a VIP operator spec on its link; a
// bad address is refused naming the field.
func TestVIPFromTheConfig(t *testing.T) {
	env := ctest.Start(t, &networkctrl.ConfigSpecController{})

	dev := &v1alpha1.Device{DeviceInterface: "cvip0", DeviceVIPConfig: &v1alpha1.DeviceVIPConfig{SharedIP: "10.9.8.50"},
		DeviceVlans: v1alpha1.VlanList{{VlanID: 5, VlanVIP: &v1alpha1.DeviceVIPConfig{SharedIP: "10.9.9.50"}}}}
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, interfacesConfig(dev)))

	for id, ip := range map[string]string{"vip/cvip0": "10.9.8.50", "vip/cvip0.5": "10.9.9.50"} {
		ctest.AssertResource(env, id, func(r *network.OperatorSpec, a *assert.Assertions) {
			a.Equal(network.OperatorVIP, r.TypedSpec().Operator)
			a.Equal(ip, r.TypedSpec().VIP.IP.String())
			a.True(r.TypedSpec().VIP.GratuitousARP)
		})
	}

	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane))
	ctest.AssertNoResource[*network.OperatorSpec](env, "vip/cvip0")
}
