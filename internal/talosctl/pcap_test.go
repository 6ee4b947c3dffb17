package talosctl

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// TestIntegrationPcap captures on the node's loopback with a BPF filter while the test sends
// UDP datagrams to two ports, then reads the pcap file back: the datagrams to the filtered port
// are there with their payloads, the others are not.
func TestIntegrationPcap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("AF_PACKET capture needs root (CAP_NET_RAW); CI runs this as root")
	}

	isolate(t)

	addr := "127.5.23.2"
	n := testenv.StartNode(t, addr, testenv.Config(t, machine.TypeControlPlane, addr))
	sock := []string{"--machined-socket", n.Socket()}

	runUntil(t, ok, append([]string{"version"}, sock...)...)

	wanted, other := udpSink(t), udpSink(t)
	out := filepath.Join(t.TempDir(), "capture.pcap")

	done := make(chan error, 1)

	go func() {
		code, _, stderr := run(t, append([]string{"pcap", "-i", "lo", "--bpf-filter", fmt.Sprintf("udp and port %d", wanted.Port), "--duration", "4s", "-o", out}, sock...)...)
		if code != 0 {
			done <- errors.New(stderr)
		}

		close(done)
	}()

	conn, err := net.DialUDP("udp", nil, wanted)
	if err != nil {
		t.Fatal(err)
	}

	defer conn.Close()

	noise, err := net.DialUDP("udp", nil, other)
	if err != nil {
		t.Fatal(err)
	}

	defer noise.Close()

	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("pcap: %v", err)
			}

			checkCapture(t, out, wanted.Port, i)

			return
		case <-time.After(100 * time.Millisecond):
			fmt.Fprintf(conn, "talos-pcap-%d", i)
			fmt.Fprintf(noise, "noise-%d", i)
		}
	}
}

func udpSink(t *testing.T) *net.UDPAddr {
	t.Helper()

	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	go io.Copy(io.Discard, c)

	return c.LocalAddr().(*net.UDPAddr)
}

func checkCapture(t *testing.T, path string, port, sent int) {
	t.Helper()

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}

	defer f.Close()

	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("not a pcap file: %v", err)
	}

	if r.LinkType() != layers.LinkTypeEthernet {
		t.Errorf("link type %v", r.LinkType())
	}

	found := 0

	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)

		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil || int(udp.DstPort) != port && int(udp.SrcPort) != port {
			t.Errorf("the filter let through a packet not to port %d: %v", port, p)

			continue
		}

		if !strings.HasPrefix(string(udp.Payload), "talos-pcap-") {
			t.Errorf("unexpected payload %q", udp.Payload)
		}

		found++
	}

	if found == 0 || found > sent {
		t.Fatalf("no captured datagrams of the %d sent to port %d", sent, port)
	}

	t.Logf("captured %d of %d datagrams", found, sent) // the last ones may arrive after the capture ends
}
