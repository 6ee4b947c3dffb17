package server

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"
)

// diskCounters reads /proc/diskstats as name → its first 11 counters.
func diskCounters(t *testing.T) map[string][]uint64 {
	t.Helper()

	data, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		t.Fatal(err)
	}

	out := map[string][]uint64{}

	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 14 {
			continue
		}

		for _, x := range f[3:14] {
			n, _ := strconv.ParseUint(x, 10, 64)
			out[f[2]] = append(out[f[2]], n)
		}
	}

	return out
}

// DiskStats lists every device of /proc/diskstats, each with its counters (read between two
// reads of the file: counters only grow) and the total their sum.
func TestDiskStats(t *testing.T) {
	c := serveViews(t, "/")

	before := diskCounters(t)
	if len(before) == 0 {
		t.Fatal("/proc/diskstats lists no devices on this host")
	}

	resp, err := c.MachineClient.DiskStats(t.Context(), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	after := diskCounters(t)
	msg := resp.Messages[0]

	var sumReads uint64

	for _, d := range msg.Devices {
		sumReads += d.ReadCompleted

		got := diskStatFields(d)[:11]
		lo, hi := before[d.Name], after[d.Name]

		if lo == nil || hi == nil {
			continue // a device that came or went between the reads
		}

		for i := range got {
			if i != 8 && (*got[i] < lo[i] || *got[i] > hi[i]) { // 8: I/Os in flight, a gauge
				t.Errorf("%s counter %d: %d, not between %d and %d", d.Name, i, *got[i], lo[i], hi[i])
			}
		}
	}

	for name := range before {
		if _, ok := after[name]; ok && !slices.ContainsFunc(msg.Devices, func(d *machine.DiskStat) bool { return d.Name == name }) {
			t.Errorf("device %s of /proc/diskstats is not listed", name)
		}
	}

	if msg.Total.ReadCompleted != sumReads || sumReads == 0 {
		t.Errorf("total reads %d, the devices' sum %d", msg.Total.ReadCompleted, sumReads)
	}
}

// NetworkDeviceStats counts traffic on lo: a megabyte sent over loopback shows in lo's bytes
// and packets, and in the total.
func TestNetworkDeviceStats(t *testing.T) {
	c := serveViews(t, "/")

	lo := func() *machine.NetDev {
		resp, err := c.MachineClient.NetworkDeviceStats(t.Context(), &emptypb.Empty{})
		if err != nil {
			t.Fatal(err)
		}

		i := slices.IndexFunc(resp.Messages[0].Devices, func(d *machine.NetDev) bool { return d.Name == "lo" })
		if i < 0 {
			t.Fatalf("no lo in %v", resp.Messages[0].Devices)
		}

		total := resp.Messages[0].Total
		if total.RxBytes < resp.Messages[0].Devices[i].RxBytes || !strings.Contains(total.Name, "lo") {
			t.Fatalf("total %v is not the sum of the devices", total)
		}

		return resp.Messages[0].Devices[i]
	}

	before := lo()

	const size = 1 << 20

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	go func() {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return
		}
		defer conn.Close()

		conn.Write(make([]byte, size)) // the reader counts what arrived
	}()

	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}

	if n, err := io.Copy(io.Discard, conn); n != size {
		t.Fatalf("received %d bytes over loopback: %v", n, err)
	}

	conn.Close()

	after := lo()

	if after.RxBytes-before.RxBytes < size || after.TxBytes-before.TxBytes < size || after.RxPackets <= before.RxPackets {
		t.Fatalf("lo after sending %d bytes: rx %d → %d, tx %d → %d, packets %d → %d", size,
			before.RxBytes, after.RxBytes, before.TxBytes, after.TxBytes, before.RxPackets, after.RxPackets)
	}
}

// CPUFreqStats answers an entry per online CPU of this host (empty ones where the host has no
// cpufreq, as upstream's).
func TestCPUFreqStatsHost(t *testing.T) {
	c := serveViews(t, "/")

	resp, err := c.MachineClient.CPUFreqStats(t.Context(), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*")
	offline := map[int]bool{}

	if data, err := os.ReadFile("/sys/devices/system/cpu/offline"); err == nil {
		offline = cpuList(strings.TrimSpace(string(data)))
	}

	if got, want := len(resp.Messages[0].CpuFreqStats), len(dirs)-len(offline); got != want || want == 0 {
		t.Fatalf("%d entries, want one per online CPU: %d", got, want)
	}
}

// cpuFreqStats reads the kernel's files per CPU, in CPU order, without the offline ones; a CPU
// whose cpuinfo_cur_freq is not readable gets scaling_cur_freq. (This host may have no cpufreq:
// the files are laid out as the kernel's.)
func TestCPUFreqStatsFiles(t *testing.T) {
	sys := t.TempDir()
	base := filepath.Join(sys, "devices/system/cpu")

	write := func(cpu int, name, value string) {
		dir := filepath.Join(base, "cpu"+strconv.Itoa(cpu), "cpufreq")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, cpu := range []int{0, 2, 10, 11} {
		write(cpu, "cpuinfo_min_freq", "800000")
		write(cpu, "cpuinfo_max_freq", "3600000")
		write(cpu, "scaling_cur_freq", strconv.Itoa(1000000+cpu))
		write(cpu, "scaling_governor", "powersave")
	}

	write(2, "cpuinfo_cur_freq", "2400000")

	if err := os.MkdirAll(filepath.Join(base, "cpu1"), 0o755); err != nil { // no cpufreq
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(base, "offline"), []byte("11\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := cpuFreqStats(sys)
	if err != nil {
		t.Fatal(err)
	}

	var cur []uint64
	for _, st := range got {
		cur = append(cur, st.CurrentFrequency)
	}

	if want := []uint64{1000000, 0, 2400000, 1000010}; !slices.Equal(cur, want) {
		t.Fatalf("current frequencies %v, want %v (cpu0, cpu1 without cpufreq, cpu2's cpuinfo_cur_freq, cpu10; cpu11 offline)", cur, want)
	}

	if st := got[3]; st.MinimumFrequency != 800000 || st.MaximumFrequency != 3600000 || st.Governor != "powersave" {
		t.Fatalf("cpu10: %v", st)
	}

	if _, err = cpuFreqStats(t.TempDir()); err == nil {
		t.Fatal("a sysfs without CPUs must fail")
	}
}
