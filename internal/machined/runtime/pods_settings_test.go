package runtime_test

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/testenv"
)

// TestValidateRefusesBadPodsAndProfiles: Validate takes machine.pods and
// machine.seccompProfiles in upstream's form, and refuses a pod that is not kind Pod or has no
// name, and a profile name that is a path, naming the item.
func TestValidateRefusesBadPodsAndProfiles(t *testing.T) {
	r := &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}}

	checkValidate(t, r, []validateCase{
		{"upstream forms", "    pods:\n        - {apiVersion: v1, kind: Pod, metadata: {name: nginx}, spec: {containers: [{name: nginx, image: nginx}]}}\n" +
			"    seccompProfiles:\n        - {name: audit.json, value: {defaultAction: SCMP_ACT_LOG}}\n", ""},
		{"not a pod", "    pods:\n        - {apiVersion: v1, kind: Pod, metadata: {name: a}}\n        - {apiVersion: apps/v1, kind: Deployment, metadata: {name: d}}\n",
			`machine.pods[1]: kind "Deployment": a static pod is kind Pod`},
		{"no name", "    pods:\n        - {apiVersion: v1, kind: Pod, metadata: {labels: {a: b}}}\n", "machine.pods[0]: metadata.name: missing"},
		{"profile path", "    seccompProfiles:\n        - {name: ../x.json, value: {defaultAction: SCMP_ACT_LOG}}\n", `machine.seccompProfiles[0].name "../x.json": a file name, not a path`},
	})
}

// validateCase is a config's machine section with extra lines, and what Validate must say: ""
// to take it, else a part of its error.
type validateCase struct{ name, extra, want string }

// checkValidate runs Validate on a worker's config with each case's lines added under machine.
func checkValidate(t *testing.T, r *runtime.Runtime, cases []validateCase) {
	t.Helper()

	full := string(testenv.Config(t, machine.TypeWorker, "127.5.0.1"))

	for _, tc := range cases {
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
