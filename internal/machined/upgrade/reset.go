package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/errkind"
	"github.com/talos-go/talos/internal/machined/sequencer"
	"github.com/talos-go/talos/internal/meta"
)

// Partitions a reset may wipe in container mode, and the default set.
var (
	resettable   = map[string]bool{"STATE": true, "EPHEMERAL": true}
	defaultReset = []string{"STATE", "EPHEMERAL"}
)

// Reset validates the request synchronously, then wipes and reboots or shuts down.
func (m *Manager) Reset(ctx context.Context, req *machine.ResetRequest, actor string) error {
	if len(req.UserDisksToWipe) > 0 || req.Mode == machine.ResetRequest_USER_DISKS {
		return errkind.New(errkind.Invalid, "container mode has no user disks: reset only the system partitions (STATE, EPHEMERAL)")
	}

	wipe := []string{}

	for _, p := range req.SystemPartitionsToWipe {
		if !resettable[p.Label] {
			return errkind.Errorf(errkind.Invalid, "partition %q cannot be wiped: choose STATE and/or EPHEMERAL", p.Label)
		}

		if p.Wipe {
			wipe = append(wipe, p.Label)
		}
	}

	if len(req.SystemPartitionsToWipe) == 0 {
		wipe = defaultReset
	}

	if !m.busy.TryLock() {
		return errBusy
	}

	log := m.log().With(zap.String("actor", actor), zap.Strings("wipe", wipe), zap.Bool("graceful", req.Graceful), zap.Bool("reboot", req.Reboot))
	cp := m.Node.IsControlPlane()

	// A graceful reset of a control plane leaves etcd: refuse it now, to the caller, when that
	// would lose quorum, rather than failing in the background after the caller was told OK.
	leave := false

	if req.Graceful && cp && m.Etcd != nil {
		var err error

		if leave, err = m.checkLeave(ctx); err != nil {
			m.busy.Unlock()

			return err
		}
	}

	rr := &resetRun{m: m, log: log, wipe: wipe, leave: leave}
	seq := sequencer.Reset(rr, sequencer.ResetOptions{Graceful: req.Graceful, ControlPlane: cp, Reboot: req.Reboot})

	m.setStage(runtimeres.MachineStageResetting, false)

	m.spawn(func(ctx context.Context) {
		defer m.busy.Unlock()

		log.Info("reset started")

		if err := seq.Run(ctx, m.R.Events, log, actor); err != nil { // logged and published by Run
			m.setStage(runtimeres.MachineStageRunning, true)
		}
	})

	return nil
}

// checkLeave tells whether a graceful reset must leave etcd (false when etcd does not run
// here: the node is no member), and refuses with FailedPrecondition when leaving would lose
// quorum or the cluster's last voting member.
func (m *Manager) checkLeave(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	err := m.Etcd.CheckHealthyWithout(ctx)

	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, etcd.ErrNotRunning):
		return false, nil
	case errors.Is(err, ErrLastMember):
		return false, errkind.New(errkind.Precondition, "reset refused, nothing was changed: this node is the only etcd voting member and leaving would lose the cluster's data; reset it with --graceful=false, or add control planes first")
	default:
		return false, errkind.Errorf(errkind.Precondition, "reset refused, nothing was changed: leaving etcd now would risk quorum: %v; wait until the other members are healthy, or reset with --graceful=false to skip leaving etcd", err)
	}
}

// resetRun is one reset in progress: the tasks of the reset sequence (sequencer.Reset).
type resetRun struct {
	m     *Manager
	log   *zap.Logger
	wipe  []string // partition labels
	leave bool     // this node is an etcd member to leave (checked by Reset)

	wipeErr error // reported with the power action: services are stopped by then
}

var _ sequencer.Resetter = (*resetRun)(nil)

// CordonAndDrain implements sequencer.Resetter.
func (rr *resetRun) CordonAndDrain(ctx context.Context) error {
	if err := rr.m.cordonAndDrain(ctx, rr.log); err != nil {
		return fmt.Errorf("%w (use --graceful=false to skip the drain)", err)
	}

	return nil
}

// LeaveEtcd implements sequencer.Resetter.
func (rr *resetRun) LeaveEtcd(ctx context.Context) error {
	switch {
	case rr.m.Etcd == nil:
		rr.log.Warn("etcd is not wired into this machined: not leaving etcd")
	case !rr.leave:
		rr.log.Info("etcd does not run on this node: nothing to leave")
	default:
		// From here the wipe must happen even if machined dies: the boot stage finishes it.
		store, err := rr.m.meta()
		if err == nil {
			err = store.Set(meta.ResetWipe, strings.Join(rr.wipe, ","))
		}

		if err != nil {
			return fmt.Errorf("recording the reset in META (etcd not left): %w", err)
		}

		if err = rr.m.Etcd.Leave(ctx); err != nil {
			return fmt.Errorf("leaving etcd (use a non-graceful reset to skip): %w", err)
		}

		rr.log.Info("left etcd")
	}

	return nil
}

// StopServices implements sequencer.Resetter.
func (rr *resetRun) StopServices(ctx context.Context) error {
	if err := rr.m.Node.StopServices(ctx); err != nil {
		rr.log.Warn("stopping services", zap.Error(err))
	}

	return nil
}

// Wipe implements sequencer.Resetter.
func (rr *resetRun) Wipe(context.Context) error {
	// A node in a container cannot reach its EPHEMERAL folder: its launcher wipes on the restart.
	if rr.m.R.Mode.ContainerNode() {
		if err := container.RequestWipe(rr.wipe); err != nil {
			rr.wipeErr = err // reported with the power action: services are stopped by then

			return nil //nolint:nilerr // the error travels in rr.wipeErr
		}

		rr.log.Info("wipe requested from the node's launcher", zap.Strings("partitions", rr.wipe))

		// The launcher owns the wipe now; the boot stage's record is not for a container node.
		if store, err := rr.m.meta(); err == nil {
			rr.wipeErr = store.Set(meta.ResetWipe, "")
		}

		return nil
	}

	// On metal the partitions are mounted and in use until the end: the next boot's initramfs
	// empties them before it mounts them anywhere (slots.ChooseBooted reads the record).
	if rr.m.metal() {
		if store, err := rr.m.meta(); err != nil {
			rr.wipeErr = err
		} else {
			rr.wipeErr = store.Set(meta.ResetWipe, strings.Join(rr.wipe, ","))
		}

		if rr.wipeErr == nil {
			rr.log.Info("wipe recorded in META: the partitions are emptied at the next boot, before they are used", zap.Strings("partitions", rr.wipe))
		}

		return nil
	}

	for _, label := range rr.wipe {
		if err := bootloader.WipeFolder(rr.m.R.Paths.Root, label); err != nil {
			rr.wipeErr = errors.Join(rr.wipeErr, fmt.Errorf("wiping %s: %w", label, err))

			continue
		}

		rr.log.Info("wiped", zap.String("partition", label))
	}

	if rr.wipeErr == nil {
		if store, err := rr.m.meta(); err == nil {
			rr.wipeErr = store.Set(meta.ResetWipe, "")
		}
	}

	return nil
}

// Reboot implements sequencer.Resetter.
func (rr *resetRun) Reboot(context.Context) error { return errors.Join(rr.wipeErr, rr.m.Node.Reboot()) }

// Shutdown implements sequencer.Resetter.
func (rr *resetRun) Shutdown(context.Context) error {
	return errors.Join(rr.wipeErr, rr.m.Node.Shutdown())
}
