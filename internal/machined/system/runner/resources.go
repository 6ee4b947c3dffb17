package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// CgroupRoot is where a node's own cgroups are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// ErrNoMemoryCgroup: the node has no memory cgroup controller mounted at CgroupRoot (a
// container node started without a cgroup).
var ErrNoMemoryCgroup = errors.New("no memory cgroup controller at " + CgroupRoot)

// Cgroup is a service's cgroup on a node with cgroups of its own (container and metal nodes),
// named and sized as upstream's (/system/apid ...). The figures are cgroup v2's. On cgroup v1
// only the hard limit has a counterpart (memory.limit_in_bytes): v1's soft limit orders
// reclaim and protects nothing, so MemoryMin and MemoryLow are not set there.
type Cgroup struct {
	Path      string  // under the cgroup root: /system/apid
	Parent    *Cgroup // made, with its figures, before this one; nil: the root's child
	MemoryMin int64   // memory.min: never reclaimed
	MemoryLow int64   // memory.low: reclaimed only when nothing else is left
	MemoryMax int64   // memory.max (memory.swap.max 0 with it), v1 memory.limit_in_bytes
	// CPUWeight is cpu.weight (1-10000, the kernel's default 100), set on cgroup v2 only and
	// only where the parent has the cpu controller; 0 leaves the default. v1's cpu.shares
	// lives in another hierarchy (cpu,cpuacct), which these cgroups are not made in.
	CPUWeight uint64
}

// MillicoresToShares is the cgroup v1 cpu.shares of a CPU figure in millicores, as upstream
// converts it: 1024 shares a core.
func MillicoresToShares(millicores uint64) uint64 { return millicores * 1024 / 1000 }

// SharesToCPUWeight maps cpu.shares (2-262144) onto cgroup v2's cpu.weight (1-10000), the
// linear map runc and upstream use.
func SharesToCPUWeight(shares uint64) uint64 {
	if shares < 2 {
		shares = 2
	}

	return (shares-2)*9999/262142 + 1
}

// MillicoresToCPUWeight is the cpu.weight of a CPU figure in millicores, as upstream's system
// cgroups get it: the figure is capped at the node's CPUs first, so on a 2-CPU node 4000
// millicores weigh as 2000 do.
func MillicoresToCPUWeight(millicores uint64) uint64 {
	return SharesToCPUWeight(MillicoresToShares(min(millicores, uint64(runtime.NumCPU())*1000)))
}

func (c *Cgroup) String() string { return c.Path }

// cgroupVersion is 2 when the root is cgroup2 (metal, a container node on a unified host), 1
// when it holds a v1 memory hierarchy (a container node on a v1 or hybrid host), else 0.
func cgroupVersion() int {
	if _, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers")); err == nil {
		return 2
	}

	if _, err := os.Stat(filepath.Join(CgroupRoot, "memory", "cgroup.procs")); err == nil {
		return 1
	}

	return 0
}

// Make makes the cgroup, its parents first, sets its memory figures and returns its folder
// of the memory controller, where a process is moved by writing its pid to cgroup.procs.
func (c *Cgroup) Make() (string, error) {
	switch cgroupVersion() {
	case 2:
		return c.make(CgroupRoot, 2)
	case 1:
		return c.make(filepath.Join(CgroupRoot, "memory"), 1)
	default:
		return "", ErrNoMemoryCgroup
	}
}

func (c *Cgroup) make(root string, version int) (string, error) {
	if c.Parent != nil {
		if _, err := c.Parent.make(root, version); err != nil {
			return "", err
		}
	}

	dir := filepath.Join(root, c.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("making cgroup %s: %w", c.Path, err)
	}

	var want [][2]string

	if version == 2 {
		// A v2 controller reaches a cgroup only when its parent hands it down; the root can hand
		// it down only when no process is in it (machined moves itself to /init first).
		if err := writeCgroupFile(filepath.Dir(dir), "cgroup.subtree_control", "+memory"); err != nil {
			return "", err
		}

		want = append(want, [2]string{"memory.min", figure(c.MemoryMin)}, [2]string{"memory.low", figure(c.MemoryLow)}, [2]string{"memory.max", limit(c.MemoryMax, "max")})
		if c.MemoryMax > 0 {
			want = append(want, [2]string{"memory.swap.max", "0"})
		}

		if c.CPUWeight > 0 && hasController(filepath.Dir(dir), "cpu") {
			if err := writeCgroupFile(filepath.Dir(dir), "cgroup.subtree_control", "+cpu"); err != nil {
				return "", err
			}

			want = append(want, [2]string{"cpu.weight", strconv.FormatUint(c.CPUWeight, 10)})
		}
	} else {
		want = append(want, [2]string{"memory.limit_in_bytes", limit(c.MemoryMax, "-1")})
	}

	for _, w := range want {
		if err := writeCgroupFile(dir, w[0], w[1]); err != nil {
			// memory.swap.max is there only with swap accounting.
			if w[0] == "memory.swap.max" && errors.Is(err, fs.ErrNotExist) {
				continue
			}

			return "", err
		}
	}

	return dir, nil
}

// hasController reports whether the v2 cgroup dir may hand controller name down to its
// children: a container node's cgroup may lack the cpu controller its host kept.
func hasController(dir, name string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))

	return err == nil && slices.Contains(strings.Fields(string(data)), name)
}

// figure is a v2 protection figure: 0 is none.
func figure(v int64) string { return strconv.FormatInt(v, 10) }

// limit is a hard limit's value; 0 is none, written as unlimited.
func limit(v int64, unlimited string) string {
	if v <= 0 {
		return unlimited
	}

	return strconv.FormatInt(v, 10)
}

func writeCgroupFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s to %s: %w", filepath.Join(dir, name), value, err)
	}

	return nil
}

// applyResources moves a started process into its cgroup and sets its oom_score_adj. Neither
// keeps a service from running: a node without cgroups of its own runs it where machined runs
// (said in the service's log), and a process node without CAP_SYS_RESOURCE cannot lower an
// oom_score_adj (said at debug level).
func (p *Process) applyResources(pid int) {
	if p.Cgroup != nil {
		if err := EnterCgroup(p.Cgroup, pid); err != nil && p.Output != nil {
			fmt.Fprintf(p.Output, "cgroup: %v: %s runs in machined's cgroup\n", err, p.Args[0])
		}
	}

	if p.OOMScoreAdj != 0 {
		err := SetOOMScoreAdj(pid, p.OOMScoreAdj)

		switch {
		case err == nil:
		case errors.Is(err, fs.ErrPermission):
			if p.Log != nil {
				p.Log.Debug("oom_score_adj not set: lowering it needs CAP_SYS_RESOURCE", zap.String("process", p.Args[0]), zap.Int("oom_score_adj", p.OOMScoreAdj))
			}
		case p.Output != nil:
			fmt.Fprintf(p.Output, "oom_score_adj: %v\n", err)
		}
	}
}

// EnterCgroup makes cgroup c and moves process pid into it.
func EnterCgroup(c *Cgroup, pid int) error {
	dir, err := c.Make()
	if err != nil {
		return err
	}

	return writeCgroupFile(dir, "cgroup.procs", strconv.Itoa(pid))
}

// MayLowerOOMScoreAdj reports whether this process holds CAP_SYS_RESOURCE, which lowering an
// oom_score_adj needs: some sandboxes withhold it even from root, and process nodes run
// unprivileged.
func MayLowerOOMScoreAdj() bool {
	const capSysResource = 24

	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}

	for line := range strings.Lines(string(data)) {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)

			return err == nil && set&(1<<capSysResource) != 0
		}
	}

	return false
}

// SetOOMScoreAdj sets the oom_score_adj of process pid (-1000 never killed, 1000 killed first).
func SetOOMScoreAdj(pid, score int) error {
	return os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "oom_score_adj"), []byte(strconv.Itoa(score)), 0o644)
}
