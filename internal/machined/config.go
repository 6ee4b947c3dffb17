package machined

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/machined/controllers/cri"
	"github.com/talos-go/talos/internal/machined/errkind"
)

// DefaultTryTimeout is how long a config applied in try mode lasts before it is reverted.
const DefaultTryTimeout = time.Minute

// LoadConfig picks the config to boot with: a staged config first, then the saved one, then
// --config on first boot. Without any, the node stays in maintenance mode.
func (n *node) LoadConfig(ctx context.Context) error {
	p := n.r.Paths

	// What a power loss in the middle of a write left; applyMu keeps an apply's write out.
	n.applyMu.Lock()
	for _, path := range []string{p.Config(), p.StagedConfig()} {
		if err := atomicfile.RemoveTemps(path); err != nil {
			n.r.Log.Warn("removing an interrupted write's temporary file", zap.Error(err))
		}
	}
	n.applyMu.Unlock()

	if _, err := os.Stat(p.StagedConfig()); err == nil {
		cfg, err := n.loadFile(p.StagedConfig())
		if err != nil {
			// A staged config that no longer loads must not block the boot: keep the old one.
			n.r.Log.Error("staged config refused, booting with the saved config", zap.Error(err))
		} else if err = atomicfile.Rename(p.StagedConfig(), p.Config()); err != nil {
			return fmt.Errorf("taking staged config: %w", err)
		} else {
			n.r.Log.Info("staged config taken", zap.String("path", p.Config()))

			return n.activate(ctx, cfg)
		}
	}

	if _, err := os.Stat(p.Config()); err == nil {
		cfg, err := n.loadFile(p.Config())
		if err != nil {
			return fmt.Errorf("saved config %s: %w", p.Config(), err)
		}

		return n.activate(ctx, cfg)
	}

	if n.opts.ConfigFile == "" {
		return nil // maintenance mode
	}

	raw, err := os.ReadFile(n.opts.ConfigFile)
	if err != nil {
		return fmt.Errorf("reading --config: %w", err)
	}

	cfg, err := n.parse(raw)
	if err != nil {
		return fmt.Errorf("--config %s refused, nothing was changed: %w", n.opts.ConfigFile, err)
	}

	if err = atomicfile.WriteFile(p.Config(), raw, 0o600); err != nil {
		return err
	}

	return n.activate(ctx, cfg)
}

func (n *node) loadFile(path string) (config.Provider, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}

	return n.parse(raw)
}

// parse loads and validates a config for this node's mode.
func (n *node) parse(raw []byte) (config.Provider, error) {
	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("loading config: %w", err)
	}

	if _, err = n.r.Validate(cfg); err != nil {
		return nil, err
	}

	return cfg, nil
}

// needsReboot reports what of a config change cannot take effect on a running node.
func needsReboot(oldCfg, newCfg config.Provider) []string {
	var changed []string

	check := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			changed = append(changed, name)
		}
	}

	om, nm := oldCfg.Machine(), newCfg.Machine()
	oc, nc := oldCfg.Cluster(), newCfg.Cluster()

	if om == nil || nm == nil || oc == nil || nc == nil {
		return []string{"machine"}
	}

	check("machine.type", om.Type(), nm.Type())
	// machine.ca changes live: the secrets controllers re-issue from it and apid reloads, which
	// is what `talosctl rotate-ca` relies on.
	check("machine.token", om.Security().Token(), nm.Security().Token())
	check("cluster.id", oc.ID(), nc.ID())
	check("cluster.secret", oc.Secret(), nc.Secret())
	check("cluster.controlPlane.endpoint", oc.Endpoint().String(), nc.Endpoint().String())
	check("cluster.etcd.ca", oc.Etcd().CA(), nc.Etcd().CA())
	// Read at boot, as upstream: the files before the services start, the environment by each
	// service's process.
	if len(om.Env()) > 0 || len(nm.Env()) > 0 {
		check("machine.env", om.Env(), nm.Env())
	}

	// CRI reads registry credentials only when containerd starts (services.Containerd).
	oAuth, _ := cri.AuthPart(om.Registries()) // a map of strings always encodes
	nAuth, _ := cri.AuthPart(nm.Registries())
	check("machine.registries.config.*.auth", oAuth, nAuth)

	// CRI reads its base runtime spec only when containerd starts, as upstream's.
	if len(om.BaseRuntimeSpecOverrides()) > 0 || len(nm.BaseRuntimeSpecOverrides()) > 0 {
		check("machine.baseRuntimeSpecOverrides", om.BaseRuntimeSpecOverrides(), nm.BaseRuntimeSpecOverrides())
	}

	oFiles, _ := om.Files() // v1alpha1's Files never fails
	nFiles, _ := nm.Files()

	if len(oFiles) > 0 || len(nFiles) > 0 {
		check("machine.files", oFiles, nFiles)
	}

	return changed
}

// ApplyConfig implements server.Lifecycle. cfg has been validated.
func (n *node) ApplyConfig(ctx context.Context, cfg config.Provider, raw []byte, req *machine.ApplyConfigurationRequest) (string, machine.ApplyConfigurationRequest_Mode, error) {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()

	mode := req.Mode
	old := n.r.Config()

	if old == nil { // maintenance mode: the config completes the boot
		return n.applyInMaintenance(ctx, cfg, raw, req)
	}

	rebootFor := needsReboot(old, cfg)

	if mode == machine.ApplyConfigurationRequest_AUTO {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
		if len(rebootFor) > 0 {
			mode = machine.ApplyConfigurationRequest_REBOOT
		}
	}

	if req.DryRun {
		diff, err := configdiff.DiffToString(old, cfg)
		if err != nil {
			return "", mode, errkind.Errorf(errkind.Internal, "computing diff: %w", err)
		}

		if diff == "" {
			diff = "No changes."
		}

		return fmt.Sprintf("Dry run summary:\nApplied configuration in mode %s would change:\n%s", mode, diff), mode, nil
	}

	if (mode == machine.ApplyConfigurationRequest_NO_REBOOT || mode == machine.ApplyConfigurationRequest_TRY) && len(rebootFor) > 0 {
		return "", mode, errkind.Errorf(errkind.Precondition,
			"changes to %v cannot be applied without a reboot: use --mode=reboot or --mode=staged", rebootFor)
	}

	// A new live config ends a pending try; a staged one does not touch the live config, so a
	// try in progress still reverts on time.
	if mode != machine.ApplyConfigurationRequest_STAGED {
		n.cancelTry()
	}

	switch mode {
	case machine.ApplyConfigurationRequest_STAGED:
		if err := atomicfile.WriteFile(n.r.Paths.StagedConfig(), raw, 0o600); err != nil {
			return "", mode, errkind.Errorf(errkind.Internal, "staging config: %w", err)
		}

		return "Staged configuration to be applied after the next reboot", mode, nil
	case machine.ApplyConfigurationRequest_TRY:
		return n.applyTry(ctx, cfg, req)
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		// The staged config is superseded: removed first, durably, or a power loss could bring
		// it back and the next boot would take it over the config applied here.
		if err := atomicfile.Remove(n.r.Paths.StagedConfig()); err != nil {
			return "", mode, errkind.Errorf(errkind.Internal, "dropping the staged config: %w", err)
		}

		if err := atomicfile.WriteFile(n.r.Paths.Config(), raw, 0o600); err != nil {
			return "", mode, errkind.Errorf(errkind.Internal, "saving config: %w", err)
		}

		if err := n.activate(ctx, cfg); err != nil {
			return "", mode, errkind.Wrap(errkind.Internal, err)
		}

		return "Applied configuration without a reboot", mode, nil
	case machine.ApplyConfigurationRequest_REBOOT:
		if err := atomicfile.Remove(n.r.Paths.StagedConfig()); err != nil {
			return "", mode, errkind.Errorf(errkind.Internal, "dropping the staged config: %w", err)
		}

		if err := atomicfile.WriteFile(n.r.Paths.Config(), raw, 0o600); err != nil {
			return "", mode, errkind.Errorf(errkind.Internal, "saving config: %w", err)
		}

		if err := n.Reboot(""); err != nil {
			return "", mode, errkind.Wrap(errkind.Precondition, err)
		}

		return "Applied configuration with a reboot", mode, nil
	}

	return "", mode, errkind.Errorf(errkind.Invalid, "unknown apply mode %v", req.Mode)
}

// applyInMaintenance saves and activates the first config of a node in maintenance mode, which
// then boots with it; n.applyMu is held.
func (n *node) applyInMaintenance(ctx context.Context, cfg config.Provider, raw []byte, req *machine.ApplyConfigurationRequest) (string, machine.ApplyConfigurationRequest_Mode, error) {
	mode := req.Mode

	if mode == machine.ApplyConfigurationRequest_TRY {
		return "", mode, errkind.New(errkind.Invalid, "try mode needs a running node: apply the config with --mode=auto in maintenance mode")
	}

	if req.DryRun {
		return "Dry run summary:\nNode is in maintenance mode and will boot with the applied config.", mode, nil
	}

	if err := atomicfile.WriteFile(n.r.Paths.Config(), raw, 0o600); err != nil {
		return "", mode, errkind.Errorf(errkind.Internal, "saving config: %w", err)
	}

	if err := n.activate(ctx, cfg); err != nil {
		return "", mode, errkind.Wrap(errkind.Internal, err)
	}

	n.readyOnce.Do(func() { close(n.configReady) })

	return "Applied configuration: the node leaves maintenance mode and boots", mode, nil
}

// applyTry activates cfg without saving it and reverts it after the try's timeout; n.applyMu is
// held.
func (n *node) applyTry(ctx context.Context, cfg config.Provider, req *machine.ApplyConfigurationRequest) (string, machine.ApplyConfigurationRequest_Mode, error) {
	mode := machine.ApplyConfigurationRequest_TRY

	timeout := DefaultTryTimeout
	if req.TryModeTimeout != nil && req.TryModeTimeout.AsDuration() > 0 {
		timeout = req.TryModeTimeout.AsDuration()
	}

	if err := n.activate(ctx, cfg); err != nil {
		return "", mode, errkind.Wrap(errkind.Internal, err)
	}

	// The timer knows itself: a revert that fired while a newer apply held the lock finds
	// another timer current and leaves the newer config alone.
	var timer *time.Timer
	timer = time.AfterFunc(timeout, func() { n.revertTry(timer) })
	n.tryRevert = timer

	return fmt.Sprintf("Applied configuration in try mode: it is reverted in %s unless applied again in another mode", timeout), mode, nil
}

func (n *node) cancelTry() {
	if n.tryRevert != nil {
		n.tryRevert.Stop()
		n.tryRevert = nil
	}
}

// revertTry puts the saved config back after a try-mode timeout, unless timer was superseded.
func (n *node) revertTry(timer *time.Timer) {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()

	if n.tryRevert != timer {
		return
	}

	n.tryRevert = nil

	cfg, err := n.loadFile(n.r.Paths.Config())
	if err != nil {
		n.r.Log.Error("try mode: reverting to the saved config failed", zap.Error(err))

		return
	}

	if err = n.activate(context.Background(), cfg); err != nil {
		n.r.Log.Error("try mode: reverting to the saved config failed", zap.Error(err))

		return
	}

	n.r.Log.Info("try mode timed out: saved config restored")
}

var errPowerPending = errors.New("a reboot or shutdown is already in progress")

func (n *node) requestPower(action powerAction) error {
	select {
	case n.power <- action:
		return nil
	default:
		return errPowerPending
	}
}

// Reboot implements server.Lifecycle: the reply is sent, then the node reboots.
func (n *node) Reboot(string) error { return n.requestPower(actionReboot) }

// Shutdown implements server.Lifecycle.
func (n *node) Shutdown(string) error { return n.requestPower(actionShutdown) }
