package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupRoot is where node cgroups are made; a variable so tests can look elsewhere.
var CgroupRoot = "/sys/fs/cgroup"

// cgroupParent is the folder under each hierarchy that holds every node's cgroup.
const cgroupParent = "talos-go"

// Limits are a node's resource limits; zero means none.
type Limits struct {
	MemoryBytes int64
	CPUs        float64
}

// Cgroup is a node's cgroup: one folder per hierarchy on cgroup v1 (memory, cpu, pids), one
// folder on cgroup v2.
type Cgroup struct {
	Dirs []string
}

// unified reports whether the machine runs cgroup v2 only.
func unified() bool {
	_, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers"))

	return err == nil
}

// Unified reports whether this machine runs cgroup v2 only, as a node with its own kernel does:
// the container nodes then get upstream's cgroup layout with all its figures.
func Unified() bool { return unified() }

// CgroupDirs are the folders of the node cgroup named name (cluster/node), made or not.
func CgroupDirs(name string) []string {
	if unified() {
		return []string{filepath.Join(CgroupRoot, cgroupParent, name)}
	}

	// Every v1 hierarchy: the node's cgroup namespace is rooted at its own cgroup in each, so
	// what containerd and runc make inside the node stays under it.
	var dirs []string

	hierarchies, _ := filepath.Glob(filepath.Join(CgroupRoot, "*", "cgroup.procs"))
	for _, procs := range hierarchies {
		if h := filepath.Dir(procs); !isLink(h) {
			dirs = append(dirs, filepath.Join(h, cgroupParent, name))
		}
	}

	return dirs
}

// NewCgroup makes the node cgroup name and sets its limits.
func NewCgroup(name string, l Limits) (*Cgroup, error) {
	cg := &Cgroup{Dirs: CgroupDirs(name)}
	if len(cg.Dirs) == 0 {
		return nil, fmt.Errorf("no memory, cpu or pids cgroup hierarchy under %s: mount cgroups first", CgroupRoot)
	}

	for _, d := range cg.Dirs {
		if unified() {
			// Each level must hand the controllers down to the next.
			for p := filepath.Join(CgroupRoot, cgroupParent); ; p = filepath.Join(p, strings.Split(strings.TrimPrefix(d, p+"/"), "/")[0]) {
				if err := os.MkdirAll(p, 0o755); err != nil {
					return nil, err
				}

				if p == d {
					break
				}

				os.WriteFile(filepath.Join(p, "cgroup.subtree_control"), []byte("+memory +cpu +pids"), 0o644) //nolint:errcheck // a controller the kernel lacks is left out; the limits below report it
			}
		} else if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating cgroup: %w", err)
		} else if err = inheritCpuset(d); err != nil {
			return nil, err
		}
	}

	return cg, cg.setLimits(l)
}

func (cg *Cgroup) setLimits(l Limits) error {
	type setting struct{ file, value string }

	var want []setting

	if l.MemoryBytes > 0 {
		want = append(want, setting{"memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)}, setting{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)})
	}

	if l.CPUs > 0 {
		quota := strconv.Itoa(int(l.CPUs * 100000))
		want = append(want, setting{"cpu.cfs_period_us", "100000"}, setting{"cpu.cfs_quota_us", quota}, setting{"cpu.max", quota + " 100000"})
	}

	for _, s := range want {
		for _, d := range cg.Dirs {
			p := filepath.Join(d, s.file)
			if _, err := os.Stat(p); err != nil {
				continue // the other cgroup version's file, or another hierarchy's
			}

			if err := os.WriteFile(p, []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("setting %s to %s: %w", p, s.value, err)
			}
		}
	}

	return nil
}

// Add moves a process into the cgroup.
func (cg *Cgroup) Add(pid int) error {
	for _, d := range cg.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving pid %d into %s: %w", pid, d, err)
		}
	}

	return nil
}

// RemoveCgroup kills whatever is left in the node cgroup name and removes its folders, then the
// cluster's and the common parent when they are empty. A cgroup that does not exist is not an error.
func RemoveCgroup(name string) error {
	var errs []error

	for _, d := range CgroupDirs(name) {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)

			continue
		}

		// Parents go when empty; another cluster's node keeps them.
		for p := filepath.Dir(d); strings.Contains(p, cgroupParent); p = filepath.Dir(p) {
			if os.Remove(p) != nil {
				break
			}
		}
	}

	return errors.Join(errs...)
}

// isLink reports whether p is a symlink (cpu,cpuacct style hierarchies have their names as links).
func isLink(p string) bool {
	st, err := os.Lstat(p)

	return err == nil && st.Mode()&os.ModeSymlink != 0
}

// inheritCpuset gives each new level of a v1 cpuset cgroup its parent's CPUs and memory nodes:
// a cpuset cgroup without them takes no process.
func inheritCpuset(d string) error {
	base := filepath.Join(CgroupRoot, "cpuset")
	if !strings.HasPrefix(d, base+"/") {
		return nil
	}

	for p := base; p != d; {
		p = filepath.Join(p, strings.Split(strings.TrimPrefix(d, p+"/"), "/")[0])

		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if cur, _ := os.ReadFile(filepath.Join(p, f)); len(strings.TrimSpace(string(cur))) > 0 {
				continue
			}

			v, err := os.ReadFile(filepath.Join(filepath.Dir(p), f))
			if err != nil {
				return err
			}

			if err = os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
				return fmt.Errorf("setting %s: %w", filepath.Join(p, f), err)
			}
		}
	}

	return nil
}

// removeCgroupDir removes a node cgroup with the cgroups made inside the node (containerd's,
// runc's), deepest first.
func removeCgroupDir(d string) error {
	if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
		return nil
	}

	entries, _ := os.ReadDir(d)
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(d, e.Name())); err != nil {
				return err
			}
		}
	}

	for range 100 {
		err := os.Remove(d)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}

		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}

		time.Sleep(50 * time.Millisecond)
	}

	return fmt.Errorf("cgroup %s is still busy: its processes did not end", d)
}
