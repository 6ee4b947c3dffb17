package provision

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/testenv"
)

// A container node's kubelet neither evicts nor collects images over the host disk's free
// share; a user's patch still wins, key by key; other provisioners keep kubelet's defaults.
func TestContainerKubeletIgnoresTheHostDisk(t *testing.T) {
	_, cp, _ := testenv.Configs(t, "10.5.0.2")

	eviction := func(cfg []byte) map[string]any {
		t.Helper()

		c, err := configloader.NewFromBytes(cfg)
		if err != nil {
			t.Fatal(err)
		}

		ev, _ := c.Machine().Kubelet().ExtraConfig()["evictionHard"].(map[string]any)

		return ev
	}

	out, err := patch(cp, basePatches(t, ProvisionerContainer))
	if err != nil {
		t.Fatal(err)
	}

	if ev := eviction(out); ev["imagefs.available"] != "0%" || ev["nodefs.available"] != "0%" {
		t.Errorf("container node's evictionHard: %v, want 0%% for nodefs and imagefs", ev)
	}

	user := `{"machine": {"kubelet": {"extraConfig": {"evictionHard": {"nodefs.available": "5%"}}}}}`
	if out, err = patch(cp, basePatches(t, ProvisionerContainer), []string{user}); err != nil {
		t.Fatal(err)
	}

	if ev := eviction(out); ev["nodefs.available"] != "5%" || ev["imagefs.available"] != "0%" {
		t.Errorf("with the user's nodefs.available: %v, want theirs and ours for imagefs", ev)
	}

	for _, p := range []string{ProvisionerQEMU, ProvisionerProcess} {
		if out, err = patch(cp, basePatches(t, p)); err != nil {
			t.Fatal(err)
		}

		if ev := eviction(out); ev != nil {
			t.Errorf("%s node's evictionHard: %v, want kubelet's defaults", p, ev)
		}
	}
}

// basePatches are the named kind's patches under the user's.
func basePatches(t *testing.T, name string) []string {
	t.Helper()

	p, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}

	return p.BasePatches()
}
