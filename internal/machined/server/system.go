package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/version"
)

// Version reports the build and the platform.
func (s *Machine) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: s.metadata(ctx),
		Version: &machine.VersionInfo{
			Tag: version.Tag, Sha: version.SHA, Built: version.Built, GoVersion: version.GoVersion(),
			Os: goruntime.GOOS, Arch: goruntime.GOARCH,
		},
		Platform: &machine.PlatformInfo{Name: cmp.Or(s.R.PlatformName, s.R.Mode.String()), Mode: s.R.Mode.String()},
		Features: &machine.FeaturesInfo{Rbac: true},
	}}}, nil
}

// Hostname reports the node's hostname.
func (s *Machine) Hostname(ctx context.Context, _ *emptypb.Empty) (*machine.HostnameResponse, error) {
	md := s.metadata(ctx)

	return &machine.HostnameResponse{Messages: []*machine.Hostname{{Metadata: md, Hostname: md.Hostname}}}, nil
}

// Memory reports /proc/meminfo.
func (s *Machine) Memory(ctx context.Context, _ *emptypb.Empty) (*machine.MemoryResponse, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, fmt.Errorf("reading meminfo: %w", err)
	}

	info := &machine.MemInfo{}
	v := reflect.ValueOf(info).Elem()

	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}

		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}

		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}

		// MemInfo field names are the meminfo keys without punctuation, e.g. "Active(anon)" -> Activeanon.
		name := strings.NewReplacer("(", "", ")", "", "_", "").Replace(key)
		name = strings.ToUpper(name[:1]) + strings.ToLower(name[1:])
		name = strings.Replace(name, "map4k", "map4K", 1)
		name = strings.Replace(name, "map2m", "map2M", 1)
		name = strings.Replace(name, "map1g", "map1G", 1)

		if f := v.FieldByName(name); f.IsValid() && f.Kind() == reflect.Uint64 {
			f.SetUint(n)
		}
	}

	return &machine.MemoryResponse{Messages: []*machine.Memory{{Metadata: s.metadata(ctx), Meminfo: info}}}, nil
}

// LoadAvg reports /proc/loadavg.
func (s *Machine) LoadAvg(ctx context.Context, _ *emptypb.Empty) (*machine.LoadAvgResponse, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil, fmt.Errorf("reading loadavg: %w", err)
	}

	f := strings.Fields(string(data))
	if len(f) < 3 {
		return nil, fmt.Errorf("unexpected loadavg %q", data)
	}

	msg := &machine.LoadAvg{Metadata: s.metadata(ctx)}
	msg.Load1, _ = strconv.ParseFloat(f[0], 64)
	msg.Load5, _ = strconv.ParseFloat(f[1], 64)
	msg.Load15, _ = strconv.ParseFloat(f[2], 64)

	return &machine.LoadAvgResponse{Messages: []*machine.LoadAvg{msg}}, nil
}

// CPUInfo reports /proc/cpuinfo.
func (s *Machine) CPUInfo(ctx context.Context, _ *emptypb.Empty) (*machine.CPUInfoResponse, error) {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return nil, fmt.Errorf("reading cpuinfo: %w", err)
	}

	var cpus []*machine.CPUInfo

	for _, block := range strings.Split(strings.TrimSpace(string(data)), "\n\n") {
		c := &machine.CPUInfo{}

		for _, line := range strings.Split(block, "\n") {
			key, val, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}

			key, val = strings.TrimSpace(key), strings.TrimSpace(val)
			u := func() uint32 { n, _ := strconv.ParseUint(val, 10, 32); return uint32(n) }
			fl := func() float64 { n, _ := strconv.ParseFloat(val, 64); return n }

			switch key {
			case "processor":
				c.Processor = u()
			case "vendor_id":
				c.VendorId = val
			case "cpu family":
				c.CpuFamily = val
			case "model":
				c.Model = val
			case "model name":
				c.ModelName = val
			case "stepping":
				c.Stepping = val
			case "microcode":
				c.Microcode = val
			case "cpu MHz":
				c.CpuMhz = fl()
			case "cache size":
				c.CacheSize = val
			case "physical id":
				c.PhysicalId = val
			case "siblings":
				c.Siblings = u()
			case "core id":
				c.CoreId = val
			case "cpu cores":
				c.CpuCores = u()
			case "apicid":
				c.ApicId = val
			case "initial apicid":
				c.InitialApicId = val
			case "fpu":
				c.Fpu = val
			case "fpu_exception":
				c.FpuException = val
			case "cpuid level":
				c.CpuIdLevel = u()
			case "wp":
				c.Wp = val
			case "flags":
				c.Flags = strings.Fields(val)
			case "bugs":
				c.Bugs = strings.Fields(val)
			case "bogomips":
				c.BogoMips = fl()
			case "clflush size":
				c.ClFlushSize = u()
			case "cache_alignment":
				c.CacheAlignment = u()
			case "address sizes":
				c.AddressSizes = val
			case "power management":
				c.PowerManagement = val
			}
		}

		cpus = append(cpus, c)
	}

	return &machine.CPUInfoResponse{Messages: []*machine.CPUsInfo{{Metadata: s.metadata(ctx), CpuInfo: cpus}}}, nil
}

// SystemStat reports /proc/stat.
func (s *Machine) SystemStat(ctx context.Context, _ *emptypb.Empty) (*machine.SystemStatResponse, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("reading stat: %w", err)
	}

	hz := 100.0 // USER_HZ
	msg := &machine.SystemStat{Metadata: s.metadata(ctx)}

	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}

		nums := make([]uint64, len(f)-1)
		for i, x := range f[1:] {
			nums[i], _ = strconv.ParseUint(x, 10, 64)
		}

		switch {
		case f[0] == "cpu" || strings.HasPrefix(f[0], "cpu"):
			st := &machine.CPUStat{}
			vals := []*float64{&st.User, &st.Nice, &st.System, &st.Idle, &st.Iowait, &st.Irq, &st.SoftIrq, &st.Steal, &st.Guest, &st.GuestNice}

			for i := range min(len(vals), len(nums)) {
				*vals[i] = float64(nums[i]) / hz
			}

			if f[0] == "cpu" {
				msg.CpuTotal = st
			} else {
				msg.Cpu = append(msg.Cpu, st)
			}
		case f[0] == "intr":
			msg.IrqTotal, msg.Irq = nums[0], nums[1:]
		case f[0] == "ctxt":
			msg.ContextSwitches = nums[0]
		case f[0] == "btime":
			msg.BootTime = nums[0]
		case f[0] == "processes":
			msg.ProcessCreated = nums[0]
		case f[0] == "procs_running":
			msg.ProcessRunning = nums[0]
		case f[0] == "procs_blocked":
			msg.ProcessBlocked = nums[0]
		case f[0] == "softirq" && len(nums) >= 11:
			msg.SoftIrqTotal = nums[0]
			msg.SoftIrq = &machine.SoftIRQStat{
				Hi: nums[1], Timer: nums[2], NetTx: nums[3], NetRx: nums[4], Block: nums[5],
				BlockIoPoll: nums[6], Tasklet: nums[7], Sched: nums[8], Hrtimer: nums[9], Rcu: nums[10],
			}
		}
	}

	return &machine.SystemStatResponse{Messages: []*machine.SystemStat{msg}}, nil
}

// Processes lists the node's processes: those of its own PID namespace, or, for a
// process-mode node, which shares the host's, machined and its descendants (the host's other
// processes are not the node's).
func (s *Machine) Processes(ctx context.Context, _ *emptypb.Empty) (*machine.ProcessesResponse, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading /proc: %w", err)
	}

	pageSize := uint64(os.Getpagesize())
	all := map[int32]*machine.ProcessInfo{}

	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}

		if p := readProcess(pid, pageSize); p != nil {
			all[p.Pid] = p
		}
	}

	keep := func(*machine.ProcessInfo) bool { return true }

	if s.R.Mode.SharesHost() {
		self := int32(os.Getpid())
		keep = func(p *machine.ProcessInfo) bool {
			for seen := 0; p != nil && seen < 64; seen++ {
				if p.Pid == self {
					return true
				}

				p = all[p.Ppid]
			}

			return false
		}
	}

	var out []*machine.ProcessInfo

	for _, p := range all {
		if keep(p) {
			out = append(out, p)
		}
	}

	sortProcesses(out)

	return &machine.ProcessesResponse{Messages: []*machine.Process{{Metadata: s.metadata(ctx), Processes: out}}}, nil
}

func sortProcesses(ps []*machine.ProcessInfo) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Pid < ps[j-1].Pid; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

func readProcess(pid int, pageSize uint64) *machine.ProcessInfo {
	dir := filepath.Join("/proc", strconv.Itoa(pid))

	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return nil
	}

	// comm is in parentheses and may hold spaces: split around the last ')'.
	open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return nil
	}

	comm := string(stat[open+1 : closing])
	f := strings.Fields(string(stat[closing+1:]))

	if len(f) < 22 {
		return nil
	}

	num := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }

	p := &machine.ProcessInfo{
		Pid:            int32(pid),
		State:          f[0],
		Ppid:           int32(num(1)),
		CpuTime:        float64(num(11)+num(12)) / 100,
		Threads:        int32(num(17)),
		VirtualMemory:  num(20),
		ResidentMemory: num(21) * pageSize,
		Command:        comm,
	}

	p.Executable, _ = os.Readlink(filepath.Join(dir, "exe"))

	if cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		p.Args = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	}

	return p
}

// Mounts reports filesystem usage: the mounts of the node's own mount namespace, or, for a
// process-mode node, which shares the host's, its partitions (folders of its state folder).
func (s *Machine) Mounts(ctx context.Context, _ *emptypb.Empty) (*machine.MountsResponse, error) {
	var stats []*machine.MountStat

	add := func(fs, path, mountedOn string) {
		var st unix.Statfs_t
		if unix.Statfs(path, &st) != nil {
			return
		}

		stats = append(stats, &machine.MountStat{
			Filesystem: fs, MountedOn: mountedOn,
			Size: st.Blocks * uint64(st.Bsize), Available: st.Bavail * uint64(st.Bsize),
		})
	}

	if s.R.Mode.SharesHost() {
		p := s.R.Paths
		add("STATE", p.State(), "/system/state")
		add("EPHEMERAL", p.Ephemeral(), "/var")
		add("BOOT", p.Boot(), "/boot")
		add("META", p.Meta(), "/meta")
	} else {
		f, err := os.Open("/proc/self/mounts")
		if err != nil {
			return nil, fmt.Errorf("reading mounts: %w", err)
		}
		defer f.Close()

		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) >= 2 {
				add(fields[0], fields[1], fields[1])
			}
		}
	}

	return &machine.MountsResponse{Messages: []*machine.Mounts{{Metadata: s.metadata(ctx), Stats: stats}}}, nil
}
