package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
)

// SeccompProfileController publishes machine.seccompProfiles as upstream's SeccompProfile
// resources (`talosctl get seccompprofiles`) and, where kubelet runs, writes each as the JSON
// file Dir/<name> (upstream's /var/lib/kubelet/seccomp/profiles), removing the files of
// profiles gone from the config. A pod's `seccompProfile: {type: Localhost, localhostProfile:
// profiles/<name>}` then names the file; containerd reads it when it creates the container, so
// a change applies to the containers started after it.
type SeccompProfileController struct {
	// Dir is kubelet's profiles folder; empty: no kubelet, no files.
	Dir string
}

// Name implements controller.Controller.
func (ctrl *SeccompProfileController) Name() string { return "cri.SeccompProfileController" }

// Inputs implements controller.Controller.
func (ctrl *SeccompProfileController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *SeccompProfileController) Outputs() []controller.Output {
	return []controller.Output{{Type: cri.SeccompProfileType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *SeccompProfileController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		var err error

		var profiles []talosconfig.SeccompProfile
		if cfg != nil && cfg.Config().Machine() != nil {
			profiles = cfg.Config().Machine().SeccompProfiles()
		}

		// Validate refused bad names; were one here, it would name a file outside Dir.
		if err = CheckSeccompProfiles(profiles); err != nil {
			return err
		}

		r.StartTrackingOutputs()

		for _, p := range profiles {
			if err = safe.WriterModify(ctx, r, cri.NewSeccompProfile(p.Name()), func(res *cri.SeccompProfile) error {
				res.TypedSpec().Name = p.Name()
				res.TypedSpec().Value = p.Value()

				return nil
			}); err != nil {
				return fmt.Errorf("writing seccomp profile %s: %w", p.Name(), err)
			}
		}

		if err = safe.CleanupOutputs[*cri.SeccompProfile](ctx, r); err != nil {
			return err
		}

		if ctrl.Dir != "" {
			if err = WriteSeccompProfiles(ctrl.Dir, profiles); err != nil {
				return err
			}
		}

		return nil
	})
}

// WriteSeccompProfiles makes dir hold exactly the profiles, each as the JSON file <name>: a
// profile's file is replaced whole (containerd never reads half of one), any other file goes.
func WriteSeccompProfiles(dir string, profiles []talosconfig.SeccompProfile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	keep := map[string]bool{}

	for _, p := range profiles {
		data, err := json.Marshal(p.Value())
		if err != nil {
			return fmt.Errorf("machine.seccompProfiles %s: encoding its value: %w", p.Name(), err)
		}

		// Read by containerd, which runs as root: nothing secret in a profile.
		if err = atomicfile.WriteFile(filepath.Join(dir, p.Name()), data, 0o644); err != nil {
			return fmt.Errorf("writing seccomp profile %s: %w", p.Name(), err)
		}

		keep[p.Name()] = true
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}

	for _, e := range entries {
		if !keep[e.Name()] {
			if err = os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("removing the dropped seccomp profile %s: %w", e.Name(), err)
			}
		}
	}

	return nil
}

// CheckSeccompProfiles refuses profiles the node cannot write as one file of kubelet's profiles
// folder: a name that is empty or a path, two of one name, or no value.
func CheckSeccompProfiles(profiles []talosconfig.SeccompProfile) error {
	var errs []error

	seen := map[string]bool{}

	for i, p := range profiles {
		name := p.Name()

		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("machine.seccompProfiles[%d].name: empty; give the profile's file name (pods name it as localhostProfile: profiles/<name>)", i))
		case name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, "."):
			errs = append(errs, fmt.Errorf("machine.seccompProfiles[%d].name %q: a file name, not a path, and not starting with '.'; give a plain name such as audit.json", i, name))
		case seen[name]:
			errs = append(errs, fmt.Errorf("machine.seccompProfiles[%d].name %q: given twice; give each profile its own name", i, name))
		}

		seen[name] = true

		if len(p.Value()) == 0 {
			errs = append(errs, fmt.Errorf("machine.seccompProfiles[%d].value: empty; give the profile (an OCI seccomp profile, e.g. {defaultAction: SCMP_ACT_LOG})", i))
		}
	}

	return errors.Join(errs...)
}
