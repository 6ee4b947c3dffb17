package services

import (
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

// The services' resources, upstream's (v1.11): the cgroup figures are the machinery module's
// constants, the oom_score_adj values those of upstream's service definitions. Upstream sets
// no GOGC for its services, so neither do we.
//
// The tree, as upstream's on a node with cgroups of its own: /init (machined), /system with
// /system/runtime (containerd), /system/apid and /system/trustd, /podruntime with
// /podruntime/etcd and /podruntime/kubelet, and /kubepods, which kubelet makes (cgroupRoot /).
// Upstream runs a second containerd for the pods (CRI) in /podruntime/runtime; we run one
// containerd for both, in /system/runtime, so /podruntime/runtime is not made. No udevd or
// dashboard cgroups: neither service runs here.
//
// CPU weights are upstream's millicores mapped to cgroup v2's cpu.weight, capped at the node's
// CPUs (runner.MillicoresToCPUWeight); etcd's is the container's cpu.shares, as upstream sets
// it, which runc maps the same way. On cgroup v1 only etcd's cpu.shares and the hard memory
// limits apply (see runner.Cgroup).
const (
	oomScoreContainerd = -999
	oomScoreAPID       = -998
	oomScoreTrustd     = -998
	oomScoreEtcd       = -998
	oomScoreKubelet    = constants.KubeletOOMScoreAdj // -450; kubelet sets the same on itself
)

// reserved is a cgroup with upstream's protection of a reserved figure: memory.min, and twice
// it as memory.low.
func reserved(path string, parent *runner.Cgroup, memory int64, millicores uint64) *runner.Cgroup {
	return &runner.Cgroup{Path: path, Parent: parent, MemoryMin: memory, MemoryLow: 2 * memory, CPUWeight: runner.MillicoresToCPUWeight(millicores)}
}

var (
	// initCgroup is machined's own: upstream's init cgroup, with memory kept for it.
	initCgroup = reserved(constants.CgroupInit, nil, constants.CgroupInitReservedMemory, constants.CgroupInitMillicores)

	// systemCgroup holds the system services, with memory kept for all of them: a child's
	// protection holds only within its parent's.
	systemCgroup = reserved(constants.CgroupSystem, nil, constants.CgroupSystemReservedMemory, constants.CgroupSystemMillicores)

	containerdCgroup = reserved(constants.CgroupSystemRuntime, systemCgroup, constants.CgroupSystemRuntimeReservedMemory, constants.CgroupSystemRuntimeMillicores)

	apidCgroup = withMax(reserved(constants.CgroupApid, systemCgroup, constants.CgroupApidReservedMemory, constants.CgroupApidMillicores), constants.CgroupApidMaxMemory)

	trustdCgroup = withMax(reserved(constants.CgroupTrustd, systemCgroup, constants.CgroupTrustdReservedMemory, constants.CgroupTrustdMillicores), constants.CgroupTrustdMaxMemory)

	// podruntimeCgroup holds Kubernetes' runtime components: a CPU weight, no memory figures.
	podruntimeCgroup = &runner.Cgroup{Path: constants.CgroupPodRuntimeRoot, CPUWeight: runner.MillicoresToCPUWeight(constants.CgroupPodRuntimeRootMillicores)}

	kubeletCgroup = reserved(constants.CgroupKubelet, podruntimeCgroup, constants.CgroupKubeletReservedMemory, constants.CgroupKubeletMillicores)

	// etcdCgroup: upstream gives etcd a soft protection only (memory.low, the container's
	// memory reservation) and its CPU as the container's shares, not capped at the CPUs.
	etcdCgroup = &runner.Cgroup{
		Path: constants.CgroupEtcd, Parent: podruntimeCgroup,
		MemoryLow: constants.CgroupEtcdReservedMemory, CPUWeight: runner.SharesToCPUWeight(etcdCPUShares),
	}
)

// etcdCPUShares is etcd's container's cpu.shares, upstream's.
var etcdCPUShares = runner.MillicoresToShares(constants.CgroupEtcdMillicores)

// withMax sets a cgroup's hard memory limit.
func withMax(c *runner.Cgroup, maxMemory int64) *runner.Cgroup {
	c.MemoryMax = maxMemory

	return c
}

// goMemLimit is a Go service's GOMEMLIMIT, as upstream's: four fifths of its cgroup's hard
// limit, so its collector works harder well before the kernel would kill it. It is set on
// process nodes too, which have no cgroup limit.
func goMemLimit(c *runner.Cgroup) string {
	return "GOMEMLIMIT=" + strconv.FormatInt(c.MemoryMax/5*4, 10)
}

// cgroupOf is a service's cgroup on a node with cgroups of its own; a process node's services
// share the host's cgroup with machined.
func cgroupOf(r *runtime.Runtime, c *runner.Cgroup) *runner.Cgroup {
	if !r.Mode.OwnsCgroups() {
		return nil
	}

	return c
}

// EnterInitCgroup moves machined into its own cgroup before it starts the services: on cgroup
// v2, the root hands the memory controller down to the services' cgroups only when no process
// is left in it (the root of a container node's cgroup namespace is not exempt). After a
// failure the services still start, and each says in its log that it runs in machined's cgroup.
func EnterInitCgroup(r *runtime.Runtime, pid int) error {
	if !r.Mode.OwnsCgroups() {
		return nil
	}

	return runner.EnterCgroup(initCgroup, pid)
}
