package runtime_test

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/testenv"
)

// machine.baseRuntimeSpecOverrides that make no OCI runtime spec are refused when the config is
// applied (machinery's validation decodes them as one), rather than stopping CRI at the next
// boot; good ones pass.
func TestValidateRefusesBadBaseRuntimeSpec(t *testing.T) {
	full := string(testenv.Config(t, machine.TypeWorker, "127.5.0.1"))
	r := &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Container}}

	for _, tc := range []struct{ name, extra, want string }{
		{"open files", "    baseRuntimeSpecOverrides:\n        process:\n            rlimits:\n                - {type: RLIMIT_NOFILE, hard: 1024, soft: 1024}\n", ""},
		{"rlimits not a list", "    baseRuntimeSpecOverrides:\n        process:\n            rlimits: 1024\n", "base runtime spec overrides: json: cannot unmarshal number into Go struct field Process.process.rlimits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configloader.NewFromBytes([]byte(strings.Replace(full, "\nmachine:\n", "\nmachine:\n"+tc.extra, 1)))
			if err != nil {
				t.Fatalf("loading: %v", err)
			}

			_, err = r.Validate(cfg)

			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
