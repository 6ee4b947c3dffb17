package container

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/talos-go/talos/internal/container/netnstest"
)

// netnsProcess is a process in a network namespace of its own, killed with the test.
func netnsProcess(t *testing.T) int {
	t.Helper()

	p := exec.Command("sleep", "120")
	p.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}

	if err := p.Start(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		p.Process.Kill()
		p.Wait()
	})

	return p.Process.Pid
}

// A node on the cluster bridge reaches an address beyond the host with the host's address as
// its source once the cluster masquerades; with that network in the exceptions
// (--no-masquerade-cidrs) its own address arrives; RemoveMasquerade leaves no table.
func TestMasquerade(t *testing.T) {
	needRootInPrivateNetns(t)

	const bridge = "br-masq"

	if err := CreateBridge(bridge, netip.MustParsePrefix("10.78.0.1/24"), 1500); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { DeleteLink(bridge) })

	node := netnsProcess(t)

	nn := NodeNetwork{Bridge: bridge, HostEnd: "veth-masq", Address: netip.MustParsePrefix("10.78.0.2/24"), Gateway: netip.MustParseAddr("10.78.0.1"), MTU: 1500}
	if err := nn.Attach(node); err != nil {
		t.Fatal(err)
	}

	// The node's namespace outlives its process (netnstest.In keeps a thread in it), and so would
	// this end: deleting it takes the pair.
	t.Cleanup(func() { DeleteLink(nn.HostEnd) })

	// "Outside": another namespace behind a veth, with a route back to the cluster network
	// (used only when the cluster does not masquerade).
	outside := netnsProcess(t)
	pid := strconv.Itoa(outside)

	for _, args := range [][]string{
		{"link", "add", "mq0", "type", "veth", "peer", "name", "mq1", "netns", pid},
		{"addr", "add", "10.79.0.1/24", "dev", "mq0"}, {"link", "set", "mq0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	t.Cleanup(func() { DeleteLink("mq0") })

	for _, args := range [][]string{
		{"addr", "add", "10.79.0.2/24", "dev", "mq1"}, {"link", "set", "mq1", "up"}, {"route", "add", "10.78.0.0/24", "via", "10.79.0.1"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"-t", pid, "-n", "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("outside: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	peers := make(chan string, 4)

	if err := netnstest.In(fmt.Sprintf("/proc/%d/ns/net", outside), func() error {
		l, err := net.Listen("tcp", "10.79.0.2:7000")
		if err != nil {
			return err
		}

		t.Cleanup(func() { l.Close() })

		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}

				peers <- c.RemoteAddr().(*net.TCPAddr).IP.String()
				c.Close()
			}
		}()

		return nil
	}); err != nil {
		t.Fatal(err)
	}

	source := func() string {
		t.Helper()

		if err := netnstest.In(fmt.Sprintf("/proc/%d/ns/net", node), func() error {
			c, err := net.DialTimeout("tcp", "10.79.0.2:7000", 5*time.Second)
			if err != nil {
				return err
			}

			return c.Close()
		}); err != nil {
			t.Fatalf("the node reaching outside: %v", err)
		}

		select {
		case p := <-peers:
			return p
		case <-time.After(5 * time.Second):
			t.Fatal("the outside saw no connection")
		}

		return ""
	}

	t.Cleanup(func() { RemoveMasquerade(bridge) })

	if err := Masquerade(bridge, netip.MustParsePrefix("10.78.0.0/24"), nil); err != nil {
		t.Fatal(err)
	}

	if got := source(); got != "10.79.0.1" {
		t.Errorf("masqueraded: the outside saw %s, want the host's 10.79.0.1", got)
	}

	if err := RemoveMasquerade(bridge); err != nil {
		t.Fatal(err)
	}

	if err := Masquerade(bridge, netip.MustParsePrefix("10.78.0.0/24"), []netip.Prefix{netip.MustParsePrefix("10.79.0.0/24")}); err != nil {
		t.Fatal(err)
	}

	if got := source(); got != "10.78.0.2" {
		t.Errorf("excepted: the outside saw %s, want the node's 10.78.0.2", got)
	}

	if err := RemoveMasquerade(bridge); err != nil {
		t.Fatal(err)
	}

	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}

	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}

	for _, tb := range tables {
		if tb.Name == "talos-"+bridge {
			t.Errorf("the table %s outlived RemoveMasquerade", tb.Name)
		}
	}
}
