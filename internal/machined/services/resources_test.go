package services

import (
	"path/filepath"
	goruntime "runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system/logging"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

const mib = 1 << 20

// The figures are upstream's (v1.11), written out here so a change of them is a change of this
// test too.
func TestServiceCgroupsAreUpstreams(t *testing.T) {
	for _, tc := range []struct {
		cg                  *runner.Cgroup
		path                string
		parent              *runner.Cgroup
		minimum, low, limit int64
		weight              uint64
	}{
		{initCgroup, "/init", nil, 96 * mib, 192 * mib, 0, runner.MillicoresToCPUWeight(2000)},
		{systemCgroup, "/system", nil, 96 * mib, 192 * mib, 0, runner.MillicoresToCPUWeight(1500)},
		{containerdCgroup, "/system/runtime", systemCgroup, 48 * mib, 96 * mib, 0, 20},
		{apidCgroup, "/system/apid", systemCgroup, 16 * mib, 32 * mib, 128 * mib, 20},
		{trustdCgroup, "/system/trustd", systemCgroup, 8 * mib, 16 * mib, 24 * mib, 10},
		{podruntimeCgroup, "/podruntime", nil, 0, 0, 0, runner.MillicoresToCPUWeight(4000)},
		{kubeletCgroup, "/podruntime/kubelet", podruntimeCgroup, 96 * mib, 192 * mib, 0, 39},
		// etcd: a soft protection only, and 2000 millicores as 2048 shares, not capped.
		{etcdCgroup, "/podruntime/etcd", podruntimeCgroup, 0, 256 * mib, 0, 79},
	} {
		assert.Equal(t, runner.Cgroup{Path: tc.path, Parent: tc.parent, MemoryMin: tc.minimum, MemoryLow: tc.low, MemoryMax: tc.limit, CPUWeight: tc.weight}, *tc.cg)
	}

	// The millicores above the node's CPUs weigh as its CPUs do: 39 a core.
	cores := uint64(goruntime.NumCPU())
	assert.Equal(t, runner.SharesToCPUWeight(min(4000, cores*1000)*1024/1000), podruntimeCgroup.CPUWeight, "%d CPUs", cores)
	assert.Equal(t, uint64(2048), etcdCPUShares)
}

// apid and trustd get upstream's GOMEMLIMIT (four fifths of their cgroup's limit) and
// oom_score_adj; a process node (this test is no node's init) gives them no cgroup.
func TestGoServicesResources(t *testing.T) {
	root := t.TempDir()

	logs, err := logging.NewManager(filepath.Join(root, "logs"))
	require.NoError(t, err)

	r := &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}, Paths: runtime.Paths{Root: root}, Address: "127.0.0.1", Logs: logs, Binary: "/bin/true"}

	for _, tc := range []struct {
		name       string
		runner     func() (any, error)
		goMemLimit string
	}{
		{"apid", func() (any, error) { return APID(r).Runner() }, "GOMEMLIMIT=107374180"},    // 128 MiB / 5 * 4
		{"trustd", func() (any, error) { return Trustd(r).Runner() }, "GOMEMLIMIT=20132656"}, // 24 MiB / 5 * 4
	} {
		got, err := tc.runner()
		require.NoError(t, err, tc.name)

		p, ok := got.(*runner.Process)
		require.True(t, ok, "%s runs as a process: %T", tc.name, got)

		assert.True(t, slices.Contains(p.Env, tc.goMemLimit), "%s environment %q lacks %s", tc.name, p.Env, tc.goMemLimit)
		assert.Equal(t, -998, p.OOMScoreAdj, tc.name)
		assert.Nil(t, p.Cgroup, tc.name)
	}

	assert.Equal(t, -999, oomScoreContainerd)
	assert.Equal(t, -450, oomScoreKubelet)
}

// etcd as a container gets upstream's oom_score_adj, memory reservation and CPU shares in its
// OCI spec, and upstream's /podruntime/etcd on a node with cgroups of its own.
func TestEtcdContainerResources(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   runtime.Mode
		cgroup *runner.Cgroup
	}{
		{"metal", runtime.Mode{Kind: runtime.Metal, PID1: true}, etcdCgroup},
		{"not the node's init", runtime.Mode{Kind: runtime.Metal}, nil},
	} {
		r := &runtime.Runtime{Mode: tc.mode, Paths: runtime.Paths{Root: t.TempDir()}}

		got := etcdContainer(r, etcd.Options{DataDir: "/var/lib/etcd", SecretsDir: "/system/secrets/etcd", OOMScoreAdj: oomScoreEtcd})([]string{"etcd"})

		ctr, ok := got.(*runner.Containerd)
		require.True(t, ok, "etcd runs as a container: %T", got)
		assert.Equal(t, -998, ctr.OOMScoreAdj, tc.name)
		assert.Equal(t, int64(256*mib), ctr.MemoryReservation, tc.name)
		assert.Equal(t, uint64(2048), ctr.CPUShares, tc.name)
		assert.Same(t, tc.cgroup, ctr.Cgroup, tc.name)
	}
}
