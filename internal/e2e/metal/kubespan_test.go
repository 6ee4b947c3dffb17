package metal

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/talos-go/talos/internal/testenv"
)

// --with-kubespan: the control plane and the worker each get the WireGuard link kubespan with an
// address in the cluster's KubeSpan network, find each other as peers through discovery and shake
// hands; from then on what they send each other (the worker's kubelet renews its lease with the
// API server every 10 s) crosses the cluster network as WireGuard only, which a capture on the
// control plane's eth0 shows.
func TestClusterCreateQEMUKubeSpan(t *testing.T) {
	_, cli, _ := qemuCluster(t, "qemu-ks")

	const cidr, gateway, cp, worker = "10.5.16.0/24", "10.5.16.1", "10.5.16.2", "10.5.16.3"

	start := time.Now()
	cli.Must(t, oneNodeCluster("qemu-ks", cidr, gateway, "--workers", "1", "--with-kubespan", "--with-uefi=false", "--with-bootloader=false", "--disk-preallocate=false")...)
	t.Logf("created with KubeSpan in %s", time.Since(start).Round(100*time.Millisecond))

	for node, peer := range map[string]string{cp: "qemu-ks-worker-1", worker: "qemu-ks-controlplane-1"} {
		testenv.WaitFor(t, node+"'s KubeSpan peer "+peer+" up", 3*time.Minute, func() error {
			out, errOut, code := cli.Run(t, "-n", node, "get", "kubespanpeerstatuses", "-o", "yaml")
			if code != 0 || !strings.Contains(out, "label: "+peer) || !strings.Contains(out, "state: up") {
				return fmt.Errorf("exit %d: %s%s", code, out, errOut)
			}

			return nil
		})

		if out := cli.Must(t, "-n", node, "get", "addresses"); !regexp.MustCompile(`kubespan/fd[0-9a-f:]+/64`).MatchString(out) {
			t.Errorf("%s: no KubeSpan address on the kubespan link:\n%s", node, out)
		}

		if out := cli.Must(t, "-n", node, "get", "kubespanidentities", "-o", "yaml"); !strings.Contains(out, "publicKey: ") || !strings.Contains(out, "address: fd") {
			t.Errorf("%s: identity:\n%s", node, out)
		}
	}

	// A capture on the control plane's eth0: between the two nodes, only WireGuard.
	pcap := filepath.Join(t.TempDir(), "eth0.pcap")
	// 12 s: longer than the kubelet's lease renewal interval, so some traffic is sure to cross.
	cli.Must(t, "-n", cp, "pcap", "-i", "eth0", "--duration", "12s", "-o", pcap)

	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}

	between := func(a, b netip.Addr) bool {
		return (a.String() == cp && b.String() == worker) || (a.String() == worker && b.String() == cp)
	}

	wireguard, other := 0, []string{}

	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break // io.EOF: the capture's end
		}

		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)

		ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok {
			continue
		}

		src, _ := netip.AddrFromSlice(ip.SrcIP)
		dst, _ := netip.AddrFromSlice(ip.DstIP)

		if !between(src, dst) {
			continue
		}

		if udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && (udp.SrcPort == 51820 && udp.DstPort == 51820) {
			wireguard++

			continue
		}

		other = append(other, p.String())
	}

	if wireguard == 0 || len(other) > 0 {
		t.Fatalf("between the nodes: %d WireGuard packets, %d others (want some, and none):\n%s", wireguard, len(other), strings.Join(other, "\n"))
	}

	t.Logf("12 s on the control plane's eth0: %d WireGuard packets between the nodes, nothing else", wireguard)
}
