package cluster_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// nodeID runs the identity controller on stateDir and returns the node id it publishes.
func nodeID(t *testing.T, stateDir string) string {
	t.Helper()

	env := ctest.Start(t, &clusterctrl.IdentityController{StateDir: stateDir})

	var id string

	ctest.AssertResource(env, cluster.LocalIdentity, func(r *cluster.Identity, a *assert.Assertions) {
		id = r.TypedSpec().NodeID
		a.NotEmpty(id)
	})

	return id
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()

	// First boot: a new id, kept in STATE (0600).
	id := nodeID(t, dir)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-zA-Z]{43}$`), id)

	path := filepath.Join(dir, clusterctrl.NodeIDFile)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, id, strings.TrimSpace(string(data)))

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// A reboot keeps it.
	assert.Equal(t, id, nodeID(t, dir))

	// Another node (another STATE) has another one.
	assert.NotEqual(t, id, nodeID(t, t.TempDir()))

	// An id kept by an earlier version (any text) is the node's id.
	kept := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(kept, clusterctrl.NodeIDFile), []byte("  node-from-before \n"), 0o600))
	assert.Equal(t, "node-from-before", nodeID(t, kept))

	// An empty file is no id: a new one is made.
	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, clusterctrl.NodeIDFile), []byte("\n"), 0o600))
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-zA-Z]{43}$`), nodeID(t, empty))
}
