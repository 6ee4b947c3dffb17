package runtime_test

import (
	"testing"

	"github.com/talos-go/talos/internal/machined/runtime"
)

// machine.baseRuntimeSpecOverrides that make no OCI runtime spec are refused when the config is
// applied (machinery's validation decodes them as one), rather than stopping CRI at the next
// boot; good ones pass.
func TestValidateRefusesBadBaseRuntimeSpec(t *testing.T) {
	checkValidate(t, &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Container}}, []validateCase{
		{"open files", "    baseRuntimeSpecOverrides:\n        process:\n            rlimits:\n                - {type: RLIMIT_NOFILE, hard: 1024, soft: 1024}\n", ""},
		{"rlimits not a list", "    baseRuntimeSpecOverrides:\n        process:\n            rlimits: 1024\n",
			"base runtime spec overrides: json: cannot unmarshal number into Go struct field Process.process.rlimits"},
	})
}
