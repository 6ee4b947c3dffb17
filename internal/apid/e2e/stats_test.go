package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/testenv"
)

// The kernel's statistics through apid, to two nodes, for a reader: each node answers with its
// metadata; process-mode nodes share the host's /proc, so lo is there with traffic (their APIs
// talk over it) and the disks are the host's.
func TestStatsThroughAPID(t *testing.T) {
	cl := getCluster(t)
	c := cl.mustClient(t, "os:reader")
	ctx := client.WithNodes(testenv.Context(t, time.Minute), cl.addrs[0], cl.addrs[1])

	disks, err := c.MachineClient.DiskStats(ctx, &emptypb.Empty{})
	if err != nil || len(disks.Messages) != 2 {
		t.Fatalf("DiskStats: %v %v", disks, err)
	}

	for _, m := range disks.Messages {
		if len(m.Devices) == 0 || m.Metadata.GetHostname() == "" {
			t.Errorf("DiskStats of %s: %v", m.Metadata.GetHostname(), m)
		}
	}

	nets, err := c.MachineClient.NetworkDeviceStats(ctx, &emptypb.Empty{})
	if err != nil || len(nets.Messages) != 2 {
		t.Fatalf("NetworkDeviceStats: %v %v", nets, err)
	}

	for _, m := range nets.Messages {
		i := slices.IndexFunc(m.Devices, func(d *machine.NetDev) bool { return d.Name == "lo" })
		if i < 0 || m.Devices[i].RxBytes == 0 || m.Devices[i].TxPackets == 0 || m.Total.RxBytes < m.Devices[i].RxBytes {
			t.Errorf("NetworkDeviceStats of %s: lo with traffic wanted: %v", m.Metadata.GetHostname(), m)
		}
	}

	freqs, err := c.MachineClient.CPUFreqStats(ctx, &emptypb.Empty{})
	if err != nil || len(freqs.Messages) != 2 || len(freqs.Messages[0].CpuFreqStats) == 0 {
		t.Fatalf("CPUFreqStats: %v %v", freqs, err)
	}
}

// talosctl logs through apid: --tail 10 prints exactly 10 lines of machined's longer log; an
// unknown service is refused with upstream's code and words.
func TestLogsTailAndUnknownThroughAPID(t *testing.T) {
	cl := getCluster(t)
	node := cl.addrs[0]

	out, errOut, err := cl.talosctl(t, "-e", node, "-n", node, "logs", "machined", "--tail", "10")
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); err != nil || len(lines) != 10 {
		t.Fatalf("logs machined --tail 10: %d lines, %v\n%s\n%s", len(lines), err, out, errOut)
	}

	all, _, err := cl.talosctl(t, "-e", node, "-n", node, "logs", "machined")
	if err != nil || strings.Count(all, "\n") <= 10 {
		t.Fatalf("machined's whole log has %d lines (%v): the tail test needs more than 10", strings.Count(all, "\n"), err)
	}

	out, errOut, err = cl.talosctl(t, "-e", node, "-n", node, "logs", "nosuch")
	if err == nil || !strings.Contains(errOut, `log "nosuch" was not registered`) {
		t.Fatalf("logs of an unknown service: %v\n%s\n%s", err, out, errOut)
	}

	c := cl.mustClient(t, "os:reader")

	s, err := c.Logs(client.WithNode(testenv.Context(t, time.Minute), node), "system", 0, "nosuch", true, -1)
	if err == nil {
		_, err = s.Recv()
	}

	if client.StatusCode(err) != codes.Unknown {
		t.Fatalf("logs -f of an unknown service: want Unknown, got %v", err)
	}
}
