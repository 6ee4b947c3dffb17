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
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
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
// under /proc/sys and the config's machine.sysfs under /sys, and publishes one
// KernelParamStatus per parameter, named as upstream's ("proc.sys.kernel.panic",
// "sys.kernel.mm.transparent_hugepage.enabled"): the value read back, the value before the node
// changed it, and whether the kernel has no such parameter.
type KernelParamController struct {
	// ProcSys is the sysctl folder ("/proc/sys" when empty).
	ProcSys string
	// Sysfs is the sysfs folder ("/sys" when empty).
	Sysfs string

	before map[string]string // each parameter's value before the node first set it, by status ID
}

// The status IDs' prefixes, upstream's: the folder of the parameter, dotted.
const (
	sysctlPrefix = "proc.sys."
	sysfsPrefix  = "sys."
)

// param is one parameter to set: its status ID, its file, and the config field that names it
// (empty for a default).
type param struct {
	id, path, field, value string
}

// ParamPath is the file of the parameter key under root: the key's dots are the path's slashes
// (kernel.mm.transparent_hugepage.enabled is root/kernel/mm/transparent_hugepage/enabled), or,
// as sysctl(8) reads a key with a slash, its slashes are, and its dots are part of the names
// (net/ipv4/conf/eth0.100/forwarding). A key that is empty, has an empty name or one that
// leaves root ("..") is an error.
func ParamPath(root, key string) (string, error) {
	sep := "."
	if strings.Contains(key, "/") {
		sep = "/"
	}

	names := strings.Split(key, sep)
	for _, name := range names {
		if name == "" || name == "." || name == ".." {
			return "", fmt.Errorf("key %q: want names joined by dots (kernel.mm.transparent_hugepage.enabled) or by slashes where a name has a dot (class/net/eth0.100/mtu), none empty and none . or .. (those leave the folder)", key)
		}
	}

	return filepath.Join(append([]string{root}, names...)...), nil
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

	if ctrl.Sysfs == "" {
		ctrl.Sysfs = "/sys"
	}

	ctrl.before = map[string]string{}

	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		var err error

		var sysctls, sysfs map[string]string
		if cfg != nil && cfg.Config().Machine() != nil {
			sysctls, sysfs = cfg.Config().Machine().Sysctls(), cfg.Config().Machine().Sysfs()
		}

		params, errs := ctrl.params(sysctls, sysfs)
		for _, err := range errs {
			log.Error("kernel parameter not set", zap.Error(err))
		}

		r.StartTrackingOutputs()

		for _, p := range params {
			status, err := ctrl.apply(p)
			if err != nil {
				log.Error("kernel parameter not set", zap.Error(err))
			}

			if err = safe.WriterModify(ctx, r, runtimeres.NewKernelParamStatus(runtimeres.NamespaceName, p.id), func(res *runtimeres.KernelParamStatus) error {
				*res.TypedSpec() = status

				return nil
			}); err != nil {
				return fmt.Errorf("writing the status of %s: %w", p.id, err)
			}
		}

		if err = safe.CleanupOutputs[*runtimeres.KernelParamStatus](ctx, r); err != nil {
			return err
		}

		return nil
	})
}

// params are the parameters to set, in order: the defaults with the config's sysctls over
// them, then its sysfs values; and an error naming the field of each key that is no path.
func (ctrl *KernelParamController) params(sysctls, sysfs map[string]string) ([]param, []error) {
	var (
		params []param
		errs   []error
	)

	want := maps.Clone(KSPPDefaults)
	maps.Copy(want, sysctls)

	for _, key := range slices.Sorted(maps.Keys(want)) {
		field := ""
		if _, ok := sysctls[key]; ok {
			field = "machine.sysctls." + key
		}

		path, err := ParamPath(ctrl.ProcSys, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))

			continue
		}

		params = append(params, param{id: sysctlPrefix + key, path: path, field: field, value: want[key]})
	}

	for _, key := range slices.Sorted(maps.Keys(sysfs)) {
		field := "machine.sysfs." + key

		path, err := ParamPath(ctrl.Sysfs, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))

			continue
		}

		params = append(params, param{id: sysfsPrefix + key, path: path, field: field, value: sysfs[key]})
	}

	return params, errs
}

// apply writes the parameter's value and reads it back. A parameter the kernel lacks is
// unsupported: no error for a default (not every kernel has every one), an error naming the
// field for one the config sets.
func (ctrl *KernelParamController) apply(p param) (runtimeres.KernelParamStatusSpec, error) {
	old, err := os.ReadFile(p.path)
	if errors.Is(err, os.ErrNotExist) {
		if p.field != "" {
			err = fmt.Errorf("%s: this kernel has no %s: remove it, or name a file there", p.field, p.path)
		} else {
			err = nil
		}

		return runtimeres.KernelParamStatusSpec{Unsupported: true}, err
	}

	if err != nil {
		return runtimeres.KernelParamStatusSpec{}, fmt.Errorf("%s: %w", p.id, err)
	}

	if _, ok := ctrl.before[p.id]; !ok {
		ctrl.before[p.id] = strings.TrimSpace(string(old))
	}

	status := runtimeres.KernelParamStatusSpec{Default: ctrl.before[p.id]}

	werr := os.WriteFile(p.path, []byte(p.value), 0o644)

	cur, err := os.ReadFile(p.path)
	if err != nil {
		return status, err
	}

	status.Current = strings.TrimSpace(string(cur))

	if werr != nil {
		name := p.field
		if name == "" {
			name = p.id
		}

		return status, fmt.Errorf("%s: writing %q to %s: %w", name, p.value, p.path, werr)
	}

	return status, nil
}
