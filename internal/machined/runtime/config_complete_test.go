package runtime_test

import (
	"errors"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/testenv"
)

// watchdogOnly is the config a user applied to a control plane: accepted, it left the node
// rebooting into a boot that never served apid again.
const watchdogOnly = "apiVersion: v1alpha1\nkind: WatchdogTimerConfig\ndevice: /dev/watchdog0\ntimeout: 2m\n"

// TestValidateRequiresV1Alpha1: the one check every path that takes a config shares.
func TestValidateRequiresV1Alpha1(t *testing.T) {
	full := string(testenv.Config(t, machine.TypeControlPlane, "127.5.0.1"))
	r := &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}}

	for _, tc := range []struct {
		name    string
		data    string
		refused bool
	}{
		{"v1alpha1 only", full, false},
		{"v1alpha1 and other documents", full + "---\napiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n", false},
		{"WatchdogTimerConfig only", watchdogOnly, true},
		{"two documents, no v1alpha1", watchdogOnly + "---\napiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n", true},
		// What `machine: {$patch: delete}` and `cluster: {$patch: delete}` leave.
		{"v1alpha1 without machine:", "version: v1alpha1\ncluster:\n  clusterName: x\n", true},
		{"v1alpha1 without cluster:", "version: v1alpha1\nmachine:\n  type: worker\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configloader.NewFromBytes([]byte(tc.data))
			if err != nil {
				t.Fatalf("loading: %v", err)
			}

			_, err = r.Validate(cfg)
			if tc.refused != errors.Is(err, runtime.ErrIncomplete) {
				t.Fatalf("refused %v, want %v: %v", !tc.refused, tc.refused, err)
			}

			if !tc.refused && err != nil {
				t.Fatalf("a complete config refused: %v", err)
			}
		})
	}

	// An empty config: the loader refuses the bytes; an empty document set reaching Validate
	// (any other way in) is refused by the check.
	if _, err := configloader.NewFromBytes(nil); err == nil {
		t.Error("empty bytes loaded")
	}

	empty, err := container.New()
	if err != nil {
		t.Fatal(err)
	}

	if _, err = r.Validate(empty); !errors.Is(err, runtime.ErrIncomplete) {
		t.Errorf("an empty config: %v", err)
	}

	if _, err = r.Validate(nil); !errors.Is(err, runtime.ErrIncomplete) {
		t.Errorf("a nil config: %v", err)
	}
}
