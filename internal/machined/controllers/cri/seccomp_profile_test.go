package cri_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	crictrl "github.com/talos-go/talos/internal/machined/controllers/cri"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

func profile(name string, value map[string]any) *v1alpha1.MachineSeccompProfile {
	return &v1alpha1.MachineSeccompProfile{MachineSeccompProfileName: name, MachineSeccompProfileValue: v1alpha1.Unstructured{Object: value}}
}

var denyMkdir = map[string]any{
	"defaultAction": "SCMP_ACT_ALLOW",
	"syscalls":      []any{map[string]any{"names": []any{"mkdir", "mkdirat"}, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}},
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()

	data, err := os.ReadFile(path)
	require.NoError(t, err)

	var v map[string]any
	require.NoError(t, json.Unmarshal(data, &v), "%s holds %q", path, data)

	return v
}

// TestSeccompProfilesFollowConfig: each profile of the config is published as upstream's
// SeccompProfile and written as JSON to the profiles folder; a changed value rewrites the file,
// a dropped profile's resource and file go, and a file the config never had goes too.
func TestSeccompProfilesFollowConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp", "profiles")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stale.json"), []byte("{}"), 0o644))

	env := ctest.Start(t, &crictrl.SeccompProfileController{Dir: dir})

	cfg := ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineSeccompProfiles = []*v1alpha1.MachineSeccompProfile{
			profile("deny-mkdir.json", denyMkdir),
			profile("audit.json", map[string]any{"defaultAction": "SCMP_ACT_LOG"}),
		}
	})
	env.Create(cfg)

	ctest.AssertIDs[*cri.SeccompProfile](env, "audit.json", "deny-mkdir.json")
	ctest.AssertResource(env, "audit.json", func(r *cri.SeccompProfile, a *assert.Assertions) {
		a.Equal("audit.json", r.TypedSpec().Name)
		a.Equal("SCMP_ACT_LOG", r.TypedSpec().Value["defaultAction"])
	})

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := os.Stat(filepath.Join(dir, "stale.json"))
		assert.True(c, os.IsNotExist(err), "the stale file is removed")
		assert.FileExists(c, filepath.Join(dir, "audit.json"))
	}, ctest.Timeout, 50*time.Millisecond)

	got := readJSON(t, filepath.Join(dir, "deny-mkdir.json"))
	assert.Equal(t, "SCMP_ACT_ALLOW", got["defaultAction"])
	assert.Equal(t, []any{map[string]any{"names": []any{"mkdir", "mkdirat"}, "action": "SCMP_ACT_ERRNO", "errnoRet": float64(1)}}, got["syscalls"])

	// audit.json changes, deny-mkdir.json goes.
	env.Put(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineSeccompProfiles = []*v1alpha1.MachineSeccompProfile{profile("audit.json", map[string]any{"defaultAction": "SCMP_ACT_ERRNO"})}
	}))

	ctest.AssertNoResource[*cri.SeccompProfile](env, "deny-mkdir.json")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := os.Stat(filepath.Join(dir, "deny-mkdir.json"))
		assert.True(c, os.IsNotExist(err), "the dropped profile's file is removed")

		data, _ := os.ReadFile(filepath.Join(dir, "audit.json"))
		assert.JSONEq(c, `{"defaultAction":"SCMP_ACT_ERRNO"}`, string(data))
	}, ctest.Timeout, 50*time.Millisecond)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only audit.json is left")
}

// TestCheckSeccompProfiles: a name that is empty, a path, hidden or given twice, and a profile
// without a value, are refused naming machine.seccompProfiles[i].
func TestCheckSeccompProfiles(t *testing.T) {
	ok := map[string]any{"defaultAction": "SCMP_ACT_LOG"}

	for _, tc := range []struct {
		name     string
		profiles []*v1alpha1.MachineSeccompProfile
		want     string
	}{
		{"plain names", []*v1alpha1.MachineSeccompProfile{profile("a.json", ok), profile("b", ok)}, ""},
		{"empty name", []*v1alpha1.MachineSeccompProfile{profile("", ok)}, "machine.seccompProfiles[0].name: empty"},
		{"path", []*v1alpha1.MachineSeccompProfile{profile("a.json", ok), profile("../../etc/x.json", ok)}, `machine.seccompProfiles[1].name "../../etc/x.json": a file name, not a path`},
		{"dot dot", []*v1alpha1.MachineSeccompProfile{profile("..", ok)}, `machine.seccompProfiles[0].name "..": a file name`},
		{"hidden", []*v1alpha1.MachineSeccompProfile{profile(".a.json", ok)}, `machine.seccompProfiles[0].name ".a.json"`},
		{"twice", []*v1alpha1.MachineSeccompProfile{profile("a.json", ok), profile("a.json", ok)}, `machine.seccompProfiles[1].name "a.json": given twice`},
		{"no value", []*v1alpha1.MachineSeccompProfile{profile("a.json", nil)}, "machine.seccompProfiles[0].value: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var profiles []talosconfig.SeccompProfile
			for _, p := range tc.profiles {
				profiles = append(profiles, p)
			}

			err := crictrl.CheckSeccompProfiles(profiles)
			if tc.want == "" {
				require.NoError(t, err)

				return
			}

			require.ErrorContains(t, err, tc.want)
		})
	}
}
