package talosctl

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// cgroupNode is one cgroup: its interface files and its children by name.
type cgroupNode struct {
	files    map[string]string
	children map[string]*cgroupNode
}

func newCgroupNode() *cgroupNode {
	return &cgroupNode{files: map[string]string{}, children: map[string]*cgroupNode{}}
}

// readCgroupTree builds the tree from a Copy archive of /sys/fs/cgroup (entries start with
// the folder's own name).
func readCgroupTree(r io.Reader) (*cgroupNode, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}

	root := newCgroupNode()
	tr := tar.NewReader(gz)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root, nil
		}

		if err != nil {
			return nil, err
		}

		_, rel, _ := strings.Cut(strings.TrimSuffix(h.Name, "/"), "/")
		if rel == "" || h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			continue
		}

		dir, file := path.Split(rel)
		if h.Typeflag == tar.TypeDir {
			dir, file = rel, ""
		}

		n := root

		for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
			if part == "" {
				continue
			}

			if n.children[part] == nil {
				n.children[part] = newCgroupNode()
			}

			n = n.children[part]
		}

		if file != "" {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}

			n.files[file] = string(b)
		}
	}
}

// cgroupNames resolves what the raw tree names by numbers: cgroups (CRI), PIDs, devices.
type cgroupNames struct {
	cgroups, procs, devices map[string]string
}

func (n cgroupNames) cgroup(name string) string {
	if r, ok := n.cgroups[name]; ok {
		return r
	}

	return name
}

// blockDevices maps "major:minor" to device names, from the node's /sys/dev/block links.
func blockDevices(ctx context.Context, s *session) map[string]string {
	out := map[string]string{}

	r, err := s.c.Copy(ctx, "/sys/dev/block")
	if err != nil {
		return out
	}
	defer r.Close()

	gz, err := gzip.NewReader(r)
	if err != nil {
		return out
	}

	tr := tar.NewReader(gz)

	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}

		if h.Typeflag == tar.TypeSymlink {
			out[path.Base(h.Name)] = path.Base(h.Linkname)
		}
	}
}

// cgroupValue is one number of a cgroup file: unset ("-" when shown), "max", or a count.
type cgroupValue struct {
	set, max bool
	n        uint64
	raw      string
}

func parseCgroupValue(s string) cgroupValue {
	s = strings.TrimSpace(s)

	switch s {
	case "":
		return cgroupValue{}
	case "max":
		return cgroupValue{set: true, max: true, raw: s}
	}

	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return cgroupValue{set: true, n: n, raw: s}
	}

	if f, err := strconv.ParseFloat(s, 64); err == nil { // PSI averages
		return cgroupValue{set: true, n: uint64(f * 100), raw: s}
	}

	return cgroupValue{set: true, raw: s}
}

func (v cgroupValue) String() string {
	if !v.set {
		return "-"
	}

	return v.raw
}

// HumanizeIBytes shows a byte count in binary units.
func (v cgroupValue) HumanizeIBytes() string {
	if !v.set || v.max {
		return v.String()
	}

	return humanize.IBytes(v.n)
}

// UsecToDuration shows microseconds as a duration.
func (v cgroupValue) UsecToDuration() string {
	if !v.set || v.max {
		return v.String()
	}

	return (time.Duration(v.n) * time.Microsecond).String()
}

// DivideBy shows v as a percentage of other.
func (v cgroupValue) DivideBy(other cgroupValue) string {
	if !v.set || !other.set || v.max || other.max || other.n == 0 {
		return "-"
	}

	return fmt.Sprintf("%.2f", float64(v.n)*100/float64(other.n))
}

// cgroupView is what a schema's templates see of one cgroup: upstream's field names over the
// cgroup v2 interface files.
type cgroupView struct {
	node   *cgroupNode
	parent *cgroupView
	names  cgroupNames
}

func (c *cgroupView) value(file string) cgroupValue { return parseCgroupValue(c.node.files[file]) }

// keyed parses "key value" lines (cpu.stat, memory.stat).
func (c *cgroupView) keyed(file string) map[string]cgroupValue {
	out := map[string]cgroupValue{}

	for _, line := range strings.Split(c.node.files[file], "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			out[k] = parseCgroupValue(v)
		}
	}

	return out
}

// nested parses "name k=v k=v" lines (io.stat by device, *.pressure by some/full).
func (c *cgroupView) nested(file string, names map[string]string) map[string]map[string]cgroupValue {
	out := map[string]map[string]cgroupValue{}

	for _, line := range strings.Split(c.node.files[file], "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}

		name := f[0]
		if r, ok := names[name]; ok {
			name = r
		}

		m := map[string]cgroupValue{}

		for _, kv := range f[1:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = parseCgroupValue(v)
			}
		}

		out[name] = m
	}

	return out
}

func (c *cgroupView) list(file string) []string { return strings.Fields(c.node.files[file]) }

// Parent is the parent cgroup, nil for the root.
func (c *cgroupView) Parent() *cgroupView { return c.parent }

func (c *cgroupView) CPUWeight() cgroupValue     { return c.value("cpu.weight") }
func (c *cgroupView) CPUWeightNice() cgroupValue { return c.value("cpu.weight.nice") }
func (c *cgroupView) CPUMax() cgroupValue        { return c.value("cpu.max") }

func (c *cgroupView) CPUStat() map[string]cgroupValue { return c.keyed("cpu.stat") }

func (c *cgroupView) CPUSetCPUs() cgroupValue          { return c.value("cpuset.cpus") }
func (c *cgroupView) CPUSetCPUsEffective() cgroupValue { return c.value("cpuset.cpus.effective") }
func (c *cgroupView) CPUSetMems() cgroupValue          { return c.value("cpuset.mems") }
func (c *cgroupView) CPUSetMemsEffective() cgroupValue { return c.value("cpuset.mems.effective") }

func (c *cgroupView) MemoryCurrent() cgroupValue     { return c.value("memory.current") }
func (c *cgroupView) MemoryPeak() cgroupValue        { return c.value("memory.peak") }
func (c *cgroupView) MemoryLow() cgroupValue         { return c.value("memory.low") }
func (c *cgroupView) MemoryHigh() cgroupValue        { return c.value("memory.high") }
func (c *cgroupView) MemoryMin() cgroupValue         { return c.value("memory.min") }
func (c *cgroupView) MemoryMax() cgroupValue         { return c.value("memory.max") }
func (c *cgroupView) MemorySwapCurrent() cgroupValue { return c.value("memory.swap.current") }
func (c *cgroupView) MemorySwapPeak() cgroupValue    { return c.value("memory.swap.peak") }
func (c *cgroupView) MemorySwapHigh() cgroupValue    { return c.value("memory.swap.high") }
func (c *cgroupView) MemorySwapMax() cgroupValue     { return c.value("memory.swap.max") }

func (c *cgroupView) MemoryStat() map[string]cgroupValue { return c.keyed("memory.stat") }

func (c *cgroupView) PidsCurrent() cgroupValue { return c.value("pids.current") }
func (c *cgroupView) PidsPeak() cgroupValue    { return c.value("pids.peak") }
func (c *cgroupView) PidsMax() cgroupValue     { return c.value("pids.max") }

func (c *cgroupView) CgroupProcs() []string   { return c.list("cgroup.procs") }
func (c *cgroupView) CgroupThreads() []string { return c.list("cgroup.threads") }

// CgroupProcsResolved names the cgroup's processes.
func (c *cgroupView) CgroupProcsResolved() []string {
	pids := c.CgroupProcs()
	out := make([]string, len(pids))

	for i, pid := range pids {
		out[i] = pid
		if name, ok := c.names.procs[pid]; ok {
			out[i] = name
		}
	}

	return out
}

func (c *cgroupView) IOStat() map[string]map[string]cgroupValue {
	return c.nested("io.stat", c.names.devices)
}

func (c *cgroupView) CPUPressure() map[string]map[string]cgroupValue {
	return c.nested("cpu.pressure", nil)
}

func (c *cgroupView) IOPressure() map[string]map[string]cgroupValue {
	return c.nested("io.pressure", nil)
}

func (c *cgroupView) MemoryPressure() map[string]map[string]cgroupValue {
	return c.nested("memory.pressure", nil)
}
