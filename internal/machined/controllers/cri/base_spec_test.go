package cri_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/cri"
)

// machine.baseRuntimeSpecOverrides, upstream's example (the open files limit), merges into
// containerd's default spec: the override replaces process.rlimits, a null removes a field, and
// the rest of the default (its capabilities, cwd, masked paths) stays; with no overrides no
// spec is written and a former one goes.
func TestBaseRuntimeSpecOverrides(t *testing.T) {
	cfg, err := configloader.NewFromBytes([]byte(`version: v1alpha1
machine:
  type: worker
  baseRuntimeSpecOverrides:
    process:
      rlimits:
        - type: RLIMIT_NOFILE
          hard: 1024
          soft: 1024
    linux:
      readonlyPaths: null
`))
	require.NoError(t, err)

	dir := filepath.Join(t.TempDir(), "conf.d")

	path, err := cri.WriteBaseRuntimeSpec(dir, cfg.Machine().BaseRuntimeSpecOverrides())
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, cri.BaseSpecName), path)

	// As containerd reads it.
	spec, err := oci.ReadSpec(path)
	require.NoError(t, err)

	require.Equal(t, []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}}, spec.Process.Rlimits)
	require.Nil(t, spec.Linux.ReadonlyPaths)
	require.Equal(t, "/", spec.Process.Cwd)
	require.Contains(t, spec.Process.Capabilities.Bounding, "CAP_CHOWN")
	require.NotEmpty(t, spec.Linux.MaskedPaths)
	require.NotEmpty(t, spec.Mounts)

	// No overrides: containerd's default, no file.
	path, err = cri.WriteBaseRuntimeSpec(dir, nil)
	require.NoError(t, err)
	require.Empty(t, path)
	require.NoFileExists(t, filepath.Join(dir, cri.BaseSpecName))
}

// Overrides that do not make an OCI spec are refused by name, before containerd would refuse to
// start CRI with them.
func TestBaseRuntimeSpecOverridesInvalid(t *testing.T) {
	_, err := cri.BaseRuntimeSpec(map[string]any{"process": map[string]any{"rlimits": "many"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "machine.baseRuntimeSpecOverrides")

	// A valid one is valid JSON of the spec's version.
	out, err := cri.BaseRuntimeSpec(map[string]any{"hostname": "pod"})
	require.NoError(t, err)

	var spec specs.Spec
	require.NoError(t, json.Unmarshal(out, &spec))
	require.Equal(t, "pod", spec.Hostname)
	require.True(t, strings.HasPrefix(spec.Version, "1."), spec.Version)
}
