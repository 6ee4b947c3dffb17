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
// Not done here: kubelet's cgroup (/podruntime/kubelet, 96 MiB protected on upstream's nodes):
// kubelet moves itself there (kubeletCgroups), so it keeps the default figures; etcd stays in
// containerd's default cgroup (/system/etcd, not upstream's /podruntime/etcd) with upstream's
// reservation; and no CPU weights.
const (
	oomScoreContainerd = -999
	oomScoreAPID       = -998
	oomScoreTrustd     = -998
	oomScoreEtcd       = -998
	oomScoreKubelet    = constants.KubeletOOMScoreAdj // -450; kubelet sets the same on itself
)

var (
	// initCgroup is machined's own: upstream's init cgroup, with memory kept for it.
	initCgroup = &runner.Cgroup{Path: constants.CgroupInit, MemoryMin: constants.CgroupInitReservedMemory, MemoryLow: 2 * constants.CgroupInitReservedMemory}

	// systemCgroup holds the system services, with memory kept for all of them: a child's
	// protection holds only within its parent's.
	systemCgroup = &runner.Cgroup{Path: constants.CgroupSystem, MemoryMin: constants.CgroupSystemReservedMemory, MemoryLow: 2 * constants.CgroupSystemReservedMemory}

	containerdCgroup = &runner.Cgroup{
		Path: constants.CgroupSystemRuntime, Parent: systemCgroup,
		MemoryMin: constants.CgroupSystemRuntimeReservedMemory, MemoryLow: 2 * constants.CgroupSystemRuntimeReservedMemory,
	}

	apidCgroup = &runner.Cgroup{
		Path: constants.CgroupApid, Parent: systemCgroup,
		MemoryMin: constants.CgroupApidReservedMemory, MemoryLow: 2 * constants.CgroupApidReservedMemory, MemoryMax: constants.CgroupApidMaxMemory,
	}

	trustdCgroup = &runner.Cgroup{
		Path: constants.CgroupTrustd, Parent: systemCgroup,
		MemoryMin: constants.CgroupTrustdReservedMemory, MemoryLow: 2 * constants.CgroupTrustdReservedMemory, MemoryMax: constants.CgroupTrustdMaxMemory,
	}
)

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
