package block

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
	"github.com/talos-go/talos/internal/udev"
)

// UdevRulesController runs machine.udev.rules on a metal node's devices (internal/udev's rule
// language): when the rules change it reloads them and replays every device as an "add" event
// (upstream writes the rules to udevd's rules.d and runs `udevadm control --reload` and
// `udevadm trigger --action=add`); then it runs them on each uevent. It keeps the /dev links the
// rules make (SYMLINK+=), removing those no rule makes any more; ATTR{file}= writes the device's
// sysfs file when the rule matches.
type UdevRulesController struct {
	Sysfs, Dev string // "/sys", "/dev"
}

// Name implements controller.Controller.
func (ctrl *UdevRulesController) Name() string { return "block.UdevRulesController" }

// Inputs implements controller.Controller.
func (ctrl *UdevRulesController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller: links and sysfs writes only.
func (ctrl *UdevRulesController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *UdevRulesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	// Without uevents (a nil channel) the rules run when they change only.
	events, stop, err := udev.Subscribe(ctx)
	if err != nil {
		log.Warn("no uevents: the config's udev rules run when they change only", zap.Error(err))
	}

	defer stop()

	var (
		rules   udev.Rules
		texts   []string
		byDev   = map[string][]string{} // device syspath → its links
		devname = map[string]string{}   // device syspath → its /dev name
		made    = map[string]bool{}     // the links this controller made
	)

	run := func(d udev.Device) {
		res := rules.Apply(d)
		for _, err := range res.Errors {
			log.Warn("udev rule", zap.String("device", d.Syspath), zap.Error(err))
		}

		if len(res.Links) > 0 && d.Env["DEVNAME"] != "" {
			byDev[d.Syspath], devname[d.Syspath] = res.Links, d.Env["DEVNAME"]
		} else {
			delete(byDev, d.Syspath)
		}
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if len(rules) == 0 {
				continue
			}

			syspath := filepath.Join(ctrl.Sysfs, ev.DevPath)

			if ev.Action == "remove" {
				delete(byDev, syspath)
			} else {
				run(udev.Device{Syspath: syspath, Action: ev.Action, Env: ev.Env})
			}
		case <-r.EventCh():
			cfg, err := activeconfig.Get(ctx, r)
			if err != nil {
				return err
			}

			var now []string
			if cfg != nil && cfg.Config().Machine() != nil && cfg.Config().Machine().Udev() != nil {
				now = cfg.Config().Machine().Udev().Rules()
			}

			if slices.Equal(now, texts) {
				continue
			}

			// The config was checked (internal/configsupport): rules that do not parse are not
			// accepted, so this only fails on a config from before that check.
			parsed, err := udev.ParseRules(now)
			if err != nil {
				log.Error("machine.udev.rules not applied", zap.Error(err))

				continue
			}

			// Reload, then trigger: every device replayed as added.
			rules, texts = parsed, now
			clear(byDev)

			if len(rules) > 0 {
				for _, syspath := range udev.AllDevices(ctrl.Sysfs) {
					run(udev.ReadDevice(syspath, "add"))
				}
			}

			log.Info("udev rules reloaded", zap.Int("rules", len(rules)))
		}

		if err := ctrl.syncLinks(byDev, devname, made); err != nil {
			log.Warn("the udev rules' links", zap.Error(err))
		}
	}
}

// syncLinks makes the links the rules want (byDev) and removes the ones it made before that no
// rule wants now; a link that is not its own (a file, another's link) is left alone.
func (ctrl *UdevRulesController) syncLinks(byDev map[string][]string, devname map[string]string, made map[string]bool) error {
	var errs []error

	want := map[string]string{}

	for dev, links := range byDev {
		for _, l := range links {
			want[l] = devname[dev]
		}
	}

	for l := range made {
		if _, ok := want[l]; !ok {
			if err := os.Remove(filepath.Join(ctrl.Dev, l)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}

			delete(made, l)
		}
	}

	for l, name := range want {
		p := filepath.Join(ctrl.Dev, l)
		if !strings.HasPrefix(p, filepath.Clean(ctrl.Dev)+"/") {
			errs = append(errs, fmt.Errorf("link %q is outside %s", l, ctrl.Dev))

			continue
		}

		target, err := filepath.Rel(filepath.Dir(p), filepath.Join(ctrl.Dev, name))
		if err != nil {
			errs = append(errs, err)

			continue
		}

		if cur, err := os.Readlink(p); err == nil && cur == target {
			made[l] = true

			continue
		}

		// Never replace what is not ours: a device node, the node's own links.
		if _, err = os.Lstat(p); err == nil && !made[l] {
			errs = append(errs, fmt.Errorf("%s exists and is not a link of the udev rules", p))

			continue
		}

		if err = os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			errs = append(errs, err)

			continue
		}

		os.Remove(p) // ours: replaced

		if err = os.Symlink(target, p); err != nil {
			errs = append(errs, err)

			continue
		}

		made[l] = true
	}

	return errors.Join(errs...)
}
