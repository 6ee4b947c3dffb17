// Package runtime holds the controllers of the runtime namespace that act on the node's own
// kernel.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// KSPPDefaults are the kernel parameters a node on its own kernel sets, as upstream's: the
// Kernel Self Protection Project's recommendations, and the values kubelet's
// protectKernelDefaults checks.
var KSPPDefaults = map[string]string{
	"kernel.kptr_restrict":             "1",
	"kernel.dmesg_restrict":            "1",
	"kernel.perf_event_paranoid":       "3",
	"kernel.kexec_load_disabled":       "1",
	"kernel.yama.ptrace_scope":         "1",
	"kernel.unprivileged_bpf_disabled": "1",
	"net.core.bpf_jit_harden":          "2",
	"dev.tty.ldisc_autoload":           "0",
	// kubelet's protectKernelDefaults
	"kernel.panic":              "10",
	"kernel.panic_on_oops":      "1",
	"vm.overcommit_memory":      "1",
	"vm.panic_on_oom":           "0",
	"kernel.keys.root_maxkeys":  "1000000",
	"kernel.keys.root_maxbytes": "25000000",
}

// KernelParamController sets the KSPP defaults and the config's machine.sysctls (which win)
// under /proc/sys, and publishes one KernelParamStatus per parameter: the value read back, the
// value before the node changed it, and whether the kernel has no such parameter.
type KernelParamController struct {
	// ProcSys is the sysctl folder ("/proc/sys" when empty).
	ProcSys string

	before map[string]string // each parameter's value before the node first set it
}

// Name implements controller.Controller.
func (ctrl *KernelParamController) Name() string { return "runtime.KernelParamController" }

// Inputs implements controller.Controller.
func (ctrl *KernelParamController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *KernelParamController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.KernelParamStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *KernelParamController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	if ctrl.ProcSys == "" {
		ctrl.ProcSys = "/proc/sys"
	}

	ctrl.before = map[string]string{}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		want := maps.Clone(KSPPDefaults)

		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil && !state.IsNotFoundError(err) {
			return err
		}

		if cfg != nil && cfg.Config().Machine() != nil {
			maps.Copy(want, cfg.Config().Machine().Sysctls())
		}

		r.StartTrackingOutputs()

		for _, key := range slices.Sorted(maps.Keys(want)) {
			status, err := ctrl.apply(key, want[key])
			if err != nil {
				log.Warn("kernel parameter", zap.String("key", key), zap.Error(err))
			}

			if err = safe.WriterModify(ctx, r, runtimeres.NewKernelParamStatus(runtimeres.NamespaceName, key), func(res *runtimeres.KernelParamStatus) error {
				*res.TypedSpec() = status

				return nil
			}); err != nil {
				return fmt.Errorf("writing the status of %s: %w", key, err)
			}
		}

		if err = safe.CleanupOutputs[*runtimeres.KernelParamStatus](ctx, r); err != nil {
			return err
		}
	}
}

// apply writes value to the parameter key and reads it back.
func (ctrl *KernelParamController) apply(key, value string) (runtimeres.KernelParamStatusSpec, error) {
	path := filepath.Join(ctrl.ProcSys, strings.ReplaceAll(key, ".", "/"))

	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return runtimeres.KernelParamStatusSpec{Unsupported: true}, nil
	}

	if err != nil {
		return runtimeres.KernelParamStatusSpec{}, err
	}

	if _, ok := ctrl.before[key]; !ok {
		ctrl.before[key] = strings.TrimSpace(string(old))
	}

	status := runtimeres.KernelParamStatusSpec{Default: ctrl.before[key]}

	werr := os.WriteFile(path, []byte(value), 0o644)

	cur, err := os.ReadFile(path)
	if err != nil {
		return status, err
	}

	status.Current = strings.TrimSpace(string(cur))

	if werr != nil {
		return status, fmt.Errorf("setting %s=%s: %w", key, value, werr)
	}

	return status, nil
}
