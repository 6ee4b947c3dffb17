package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The kernel's statistics, read as upstream reads them. A container-mode or metal node reads
// its own /proc and /sys: its own network devices, and the kernel's disks and CPUs, which every
// namespace shares (upstream's nodes in Docker show the host's too). A process-mode node shares
// the host's /proc and /sys, so it answers with the host's network devices as well, as upstream
// in a container on the host's network does.

// CPUFreqStats reports each online CPU's frequency scaling (kHz) and governor, in CPU order.
func (s *Machine) CPUFreqStats(ctx context.Context, _ *emptypb.Empty) (*machine.CPUFreqStatsResponse, error) {
	stats, err := cpuFreqStats("/sys")
	if err != nil {
		return nil, err
	}

	return &machine.CPUFreqStatsResponse{Messages: []*machine.CPUsFreqStats{{Metadata: s.metadata(ctx), CpuFreqStats: stats}}}, nil
}

// DiskStats reports /proc/diskstats: each block device's counters and their sum.
func (s *Machine) DiskStats(ctx context.Context, _ *emptypb.Empty) (*machine.DiskStatsResponse, error) {
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return nil, fmt.Errorf("reading diskstats: %w", err)
	}
	defer f.Close()

	msg, err := diskStats(f)
	if err != nil {
		return nil, err
	}

	msg.Metadata = s.metadata(ctx)

	return &machine.DiskStatsResponse{Messages: []*machine.DiskStats{msg}}, nil
}

// NetworkDeviceStats reports /proc/net/dev: each network device's counters and their sum.
func (s *Machine) NetworkDeviceStats(ctx context.Context, _ *emptypb.Empty) (*machine.NetworkDeviceStatsResponse, error) {
	f, err := os.Open("/proc/net/dev")
	if err != nil {
		return nil, fmt.Errorf("reading net/dev: %w", err)
	}
	defer f.Close()

	msg, err := netDevStats(f)
	if err != nil {
		return nil, err
	}

	msg.Metadata = s.metadata(ctx)

	return &machine.NetworkDeviceStatsResponse{Messages: []*machine.NetworkDeviceStats{msg}}, nil
}

// cpuFreqStats reads sys/devices/system/cpu/cpuN/cpufreq for each online CPU. A CPU without
// cpufreq (a VM, a container host without a driver) gets an empty entry, as upstream's. The
// current frequency is cpuinfo_cur_freq (the hardware's), else scaling_cur_freq: the first is
// readable by root only and some drivers (intel_pstate) have none.
func cpuFreqStats(sys string) ([]*machine.CPUFreqStats, error) {
	base := filepath.Join(sys, "devices/system/cpu")

	dirs, _ := filepath.Glob(filepath.Join(base, "cpu[0-9]*")) // the pattern is well formed
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no CPUs in %s", base)
	}

	var cpus []int

	for _, d := range dirs {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "cpu")); err == nil {
			cpus = append(cpus, n)
		}
	}

	slices.Sort(cpus) // numeric: cpu10 after cpu9, the order of SystemStat's CPUs

	offline := map[int]bool{}
	if data, err := os.ReadFile(filepath.Join(base, "offline")); err == nil {
		offline = cpuList(strings.TrimSpace(string(data)))
	}

	readUint := func(dir, name string) (uint64, bool) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, false
		}

		n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)

		return n, err == nil
	}

	out := make([]*machine.CPUFreqStats, 0, len(cpus))

	for _, n := range cpus {
		if offline[n] {
			continue
		}

		dir := filepath.Join(base, "cpu"+strconv.Itoa(n), "cpufreq")
		st := &machine.CPUFreqStats{}

		cur, ok := readUint(dir, "cpuinfo_cur_freq")
		if !ok {
			cur, _ = readUint(dir, "scaling_cur_freq")
		}

		st.CurrentFrequency = cur
		st.MinimumFrequency, _ = readUint(dir, "cpuinfo_min_freq")
		st.MaximumFrequency, _ = readUint(dir, "cpuinfo_max_freq")

		if gov, err := os.ReadFile(filepath.Join(dir, "scaling_governor")); err == nil {
			st.Governor = strings.TrimSpace(string(gov))
		}

		out = append(out, st)
	}

	return out, nil
}

// cpuList parses the kernel's CPU list format ("0-3,8,10-11").
func cpuList(s string) map[int]bool {
	set := map[int]bool{}

	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}

		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)

		if errA != nil || errB != nil {
			continue
		}

		for n := a; n <= b; n++ {
			set[n] = true
		}
	}

	return set
}

// diskStats parses /proc/diskstats: "major minor name" and then 11 counters (kernels before
// 4.18), 15 with the discard counters, 17 with the flush counters (not in the API).
func diskStats(r io.Reader) (*machine.DiskStats, error) {
	msg := &machine.DiskStats{Total: &machine.DiskStat{}}
	sc := bufio.NewScanner(r)

	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 14 {
			continue
		}

		st := &machine.DiskStat{Name: f[2]}
		vals := diskStatFields(st)
		sums := diskStatFields(msg.Total)

		for i, x := range f[3:min(len(f), 3+len(vals))] {
			n, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("diskstats: %s: field %d: %w", f[2], i+4, err)
			}

			*vals[i] = n
			*sums[i] += n
		}

		msg.Devices = append(msg.Devices, st)
	}

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading diskstats: %w", err)
	}

	return msg, nil
}

// diskStatFields are st's counters in /proc/diskstats' order.
func diskStatFields(st *machine.DiskStat) []*uint64 {
	return []*uint64{
		&st.ReadCompleted, &st.ReadMerged, &st.ReadSectors, &st.ReadTimeMs,
		&st.WriteCompleted, &st.WriteMerged, &st.WriteSectors, &st.WriteTimeMs,
		&st.IoInProgress, &st.IoTimeMs, &st.IoTimeWeightedMs,
		&st.DiscardCompleted, &st.DiscardMerged, &st.DiscardSectors, &st.DiscardTimeMs,
	}
}

// netDevStats parses /proc/net/dev: two header lines, then "name: " and 16 counters, receive
// then transmit. The total's name lists the devices, sorted, as upstream's.
func netDevStats(r io.Reader) (*machine.NetworkDeviceStats, error) {
	msg := &machine.NetworkDeviceStats{Total: &machine.NetDev{}}
	sc := bufio.NewScanner(r)

	var names []string

	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":") // device names hold no ':'
		if !ok {
			continue // a header line
		}

		f := strings.Fields(rest)
		dev := &machine.NetDev{Name: strings.TrimSpace(name)}
		vals := netDevFields(dev)
		sums := netDevFields(msg.Total)

		if len(f) != len(vals) {
			return nil, fmt.Errorf("net/dev: %s has %d counters, want %d", dev.Name, len(f), len(vals))
		}

		for i, x := range f {
			n, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("net/dev: %s: counter %d: %w", dev.Name, i+1, err)
			}

			*vals[i] = n
			*sums[i] += n
		}

		msg.Devices = append(msg.Devices, dev)
		names = append(names, dev.Name)
	}

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading net/dev: %w", err)
	}

	sort.Strings(names)
	msg.Total.Name = strings.Join(names, ", ")

	return msg, nil
}

// netDevFields are dev's counters in /proc/net/dev's order.
func netDevFields(dev *machine.NetDev) []*uint64 {
	return []*uint64{
		&dev.RxBytes, &dev.RxPackets, &dev.RxErrors, &dev.RxDropped, &dev.RxFifo, &dev.RxFrame, &dev.RxCompressed, &dev.RxMulticast,
		&dev.TxBytes, &dev.TxPackets, &dev.TxErrors, &dev.TxDropped, &dev.TxFifo, &dev.TxCollisions, &dev.TxCarrier, &dev.TxCompressed,
	}
}
