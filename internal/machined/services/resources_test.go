package services

import (
	"path/filepath"
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
	}{
		{initCgroup, "/init", nil, 96 * mib, 192 * mib, 0},
		{systemCgroup, "/system", nil, 96 * mib, 192 * mib, 0},
		{containerdCgroup, "/system/runtime", systemCgroup, 48 * mib, 96 * mib, 0},
		{apidCgroup, "/system/apid", systemCgroup, 16 * mib, 32 * mib, 128 * mib},
		{trustdCgroup, "/system/trustd", systemCgroup, 8 * mib, 16 * mib, 24 * mib},
	} {
		assert.Equal(t, runner.Cgroup{Path: tc.path, Parent: tc.parent, MemoryMin: tc.minimum, MemoryLow: tc.low, MemoryMax: tc.limit}, *tc.cg)
	}
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

// etcd as a container gets upstream's oom_score_adj and memory reservation in its OCI spec.
func TestEtcdContainerResources(t *testing.T) {
	r := &runtime.Runtime{Paths: runtime.Paths{Root: t.TempDir()}}

	got := etcdContainer(r, etcd.Options{DataDir: "/var/lib/etcd", SecretsDir: "/system/secrets/etcd", OOMScoreAdj: oomScoreEtcd})([]string{"etcd"})

	ctr, ok := got.(*runner.Containerd)
	require.True(t, ok, "etcd runs as a container: %T", got)
	assert.Equal(t, -998, ctr.OOMScoreAdj)
	assert.Equal(t, int64(256*mib), ctr.MemoryReservation)
}
