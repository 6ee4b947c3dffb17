package vm

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func testSpec(t *testing.T) NetworkSpec {
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte("version: v1alpha1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	return NetworkSpec{
		Bridge: "br-test", Gateway: netip.MustParsePrefix("10.5.0.1/24"), Nameservers: []netip.Addr{netip.MustParseAddr("10.5.0.1"), netip.MustParseAddr("fd00::1")},
		Nodes: []NodeLease{
			{Name: "n1", MAC: "52:54:00:05:00:02", Address: netip.MustParseAddr("127.0.0.1"), Config: cfg},
			{Name: "n2", MAC: "52:54:00:05:00:03", Address: netip.MustParseAddr("10.5.0.3"), Config: cfg},
		},
	}
}

// exchange sends m to the handler over a real UDP socket pair and returns its answer, or nil
// when it answers nothing.
func exchange(t *testing.T, s NetworkSpec, m *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()

	server, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	client, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	s.HandleDHCP(server, client.LocalAddr(), m)

	client.SetReadDeadline(time.Now().Add(200 * time.Millisecond))

	buf := make([]byte, 1500)

	n, _, err := client.ReadFrom(buf)
	if err != nil {
		return nil
	}

	reply, err := dhcpv4.FromBytes(buf[:n])
	if err != nil {
		t.Fatal(err)
	}

	return reply
}

func request(t *testing.T, typ dhcpv4.MessageType, mac string, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}

	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(typ)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}

	return m
}

func TestDHCPGivesEachNodeItsAddress(t *testing.T) {
	s := testSpec(t)

	offer := exchange(t, s, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:05:00:03"))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("DISCOVER: got %v, want an OFFER", offer)
	}

	for what, ok := range map[string]bool{
		"its address":      offer.YourIPAddr.Equal(net.ParseIP("10.5.0.3")),
		"the bridge's /24": offer.SubnetMask().String() == net.CIDRMask(24, 32).String(),
		"the router":       len(offer.Router()) == 1 && offer.Router()[0].Equal(net.ParseIP("10.5.0.1")),
		"the server id":    offer.ServerIdentifier().Equal(net.ParseIP("10.5.0.1")),
		"IPv4 resolvers":   len(offer.DNS()) == 1 && offer.DNS()[0].Equal(net.ParseIP("10.5.0.1")),
		"its hostname":     offer.HostName() == "n2",
		"a day's lease":    offer.IPAddressLeaseTime(0) == LeaseTime,
	} {
		if !ok {
			t.Errorf("the offer lacks %s:\n%s", what, offer.Summary())
		}
	}

	ack := exchange(t, s, request(t, dhcpv4.MessageTypeRequest, "52:54:00:05:00:03", dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.5.0.3")))))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(net.ParseIP("10.5.0.3")) {
		t.Fatalf("REQUEST of its address: got %v, want an ACK of 10.5.0.3", ack)
	}

	// Another node's address is refused.
	nak := exchange(t, s, request(t, dhcpv4.MessageTypeRequest, "52:54:00:05:00:03", dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("127.0.0.1")))))
	if nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("REQUEST of another address: got %v, want a NAK", nak)
	}

	// A machine that is not a node of the cluster gets nothing.
	if got := exchange(t, s, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:aa:bb:cc")); got != nil {
		t.Fatalf("a stranger got %s", got.Summary())
	}
}

// The config server gives a config to its node's address only: the config holds the secrets.
func TestConfigServedToItsNodeOnly(t *testing.T) {
	s := testSpec(t)
	srv := httptest.NewServer(http.HandlerFunc(s.serveConfig))
	t.Cleanup(srv.Close)

	for path, want := range map[string]int{
		ConfigPath("n1"):    http.StatusOK,        // n1's address is the test's 127.0.0.1
		ConfigPath("n2"):    http.StatusForbidden, // n2 is 10.5.0.3
		ConfigPath("other"): http.StatusNotFound,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}

		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()

		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d (%s)", path, resp.StatusCode, want, body)
		}

		if want == http.StatusOK && string(body) != "version: v1alpha1\n" {
			t.Errorf("%s: served %q", path, body)
		}
	}
}

func TestDHCPWithoutHostname(t *testing.T) {
	s := testSpec(t)
	s.NoHostname = true

	offer := exchange(t, s, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:05:00:03"))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer || offer.HostName() != "" {
		t.Fatalf("got %v, want an offer naming no hostname", offer)
	}
}

// The nodes' JSON logs: every line each connection sends is appended to the file.
func TestReceiveLogs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "json-logs.log")

	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	done := make(chan struct{})

	go func() {
		receiveLogs(l, f)
		close(done)
	}()

	for _, line := range []string{`{"msg":"a","talos-service":"apid"}`, `{"msg":"b","talos-service":"machined"}`} {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}

		fmt.Fprintln(conn, line)
		conn.Close()
	}

	waitUntil(t, func() bool {
		b, _ := os.ReadFile(file)

		return strings.Count(string(b), "\n") == 2 && strings.Contains(string(b), `"talos-service":"apid"`) && strings.Contains(string(b), `"msg":"b"`)
	})

	// It ends when its listener is closed.
	l.Close()

	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("receiveLogs still runs after its listener closed")
	}
}

// waitUntil polls cond for ten seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()

	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the logs were not written")
		}
	}
}

// With an iPXE boot script, iPXE (its user class) gets the script's URL as its boot file; a
// client that is not iPXE gets none.
func TestDHCPGivesIPXEItsScript(t *testing.T) {
	s := testSpec(t)
	s.IPXEBootScript = "http://10.5.0.1:8080/boot.ipxe"

	ipxe := exchange(t, s, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:05:00:03", dhcpv4.WithUserClass("iPXE", false)))
	if ipxe == nil || ipxe.BootFileName != s.IPXEBootScript || ipxe.BootFileNameOption() != s.IPXEBootScript {
		t.Fatalf("iPXE's offer: %v", ipxe)
	}

	if other := exchange(t, s, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:05:00:03")); other == nil || other.BootFileName != "" || other.BootFileNameOption() != "" {
		t.Fatalf("another client's offer names a boot file: %v", other)
	}
}
