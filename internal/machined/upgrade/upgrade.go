// Package upgrade is machined's side of image-based upgrades, rollback and reset in container
// mode: it verifies a signed image, writes it to the inactive boot slot, sets boot-once in META
// and reboots through the boot stage (internal/bootloader), which falls back to the previous
// slot if the new version does not report a successful boot (BootSucceeded).
package upgrade

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/version"
)

// Node is what the upgrade asks of the running machined.
type Node interface {
	// StopServices stops every service in reverse dependency order.
	StopServices(ctx context.Context) error
	Reboot() error
	Shutdown() error
	// IsControlPlane reports the machine type of the active config.
	IsControlPlane() bool
}

// Manager runs upgrades, rollbacks and resets; one at a time.
type Manager struct {
	R    *runtime.Runtime
	Node Node
	// Etcd guards control-plane upgrades and resets; nil until machined wires its etcd service
	// (a control plane then upgrades without the etcd checks and lock, and says so in the log).
	Etcd EtcdGuard
	// Slot is the slot this machined runs from ("" when not started by the boot stage).
	Slot string
	// StepTimeout bounds waiting for etcd health and the upgrade lock.
	StepTimeout time.Duration
	// MustBeUp are the services that must be up (when this node runs them) before a boot counts
	// as successful.
	MustBeUp []string

	busy sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Manager for the machined described by r.
func New(r *runtime.Runtime, node Node) *Manager {
	ctx, cancel := context.WithCancel(context.Background())

	return &Manager{R: r, Node: node, Slot: bootloader.CurrentSlot(), StepTimeout: 10 * time.Minute, MustBeUp: []string{"etcd"}, ctx: ctx, cancel: cancel}
}

// Close stops work in progress and waits for it.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

func (m *Manager) log() *zap.Logger {
	if m.R.Log == nil {
		return zap.NewNop()
	}

	return m.R.Log.Named("upgrade")
}

func (m *Manager) meta() (*meta.Store, error) { return meta.Open(m.R.Paths.Meta()) }

// TrustedKeys are the image keys this node trusts.
func (m *Manager) TrustedKeys() ([]ed25519.PublicKey, error) {
	return imager.NodeKeys(filepath.Join(m.R.Paths.Root, bootloader.TrustedKeysPath))
}

func (m *Manager) spawn(fn func(ctx context.Context)) {
	m.wg.Add(1)

	go func() {
		defer m.wg.Done()

		fn(m.ctx)
	}()
}

var errBusy = status.Error(codes.FailedPrecondition, "another upgrade, rollback or reset is in progress on this node: wait for it to finish")

func (m *Manager) needSlots() error {
	if m.Slot == "" {
		return status.Error(codes.FailedPrecondition, "this node was not started through the boot stage, so it has no A/B slots: start it with `machined boot --state DIR ...`")
	}

	return nil
}

// BootSucceeded makes the running slot permanent if it is being tried. It is called when the
// boot sequence is complete (config loaded, services started, machine API serving); it first
// waits, in the background, for the services in MustBeUp that this node runs (etcd on a
// control plane) to be up. A slot that never gets there is abandoned by the boot stage's
// watchdog. It ends with Close.
func (m *Manager) BootSucceeded() {
	if m.Slot == "" {
		return
	}

	m.spawn(func(ctx context.Context) {
		if sup := m.R.Supervisor; sup != nil {
			for _, id := range m.MustBeUp {
				if _, ok := sup.Get(id); !ok {
					continue
				}

				if err := sup.WaitFor(ctx, id, func(i system.Info) bool { return system.IsUp(i) || i.State == system.StateSkipped }); err != nil {
					return
				}
			}
		}

		// A control plane whose etcd is up again is back in the cluster: clear its rejoin
		// record, if an upgrade without --preserve left one.
		if m.Etcd != nil && m.Node.IsControlPlane() {
			if err := m.Etcd.Rejoined(ctx, m.R.Address); err != nil {
				m.log().Warn("clearing the etcd rejoin record", zap.Error(err))
			}
		}

		store, err := m.meta()
		if err != nil {
			m.log().Error("reporting a successful boot", zap.Error(err))

			return
		}

		done, err := bootloader.MarkBootSuccessful(store, m.Slot)
		if err != nil {
			m.log().Error("reporting a successful boot", zap.Error(err))

			return
		}

		if done {
			v, _ := store.Read()
			m.log().Info("upgrade complete: slot is now permanent", zap.String("slot", m.Slot),
				zap.String("from", v[meta.UpgradeFrom]), zap.String("to", version.Tag))

			if v[meta.UpgradeTo] != "" && v[meta.UpgradeTo] != version.Tag {
				m.log().Warn("the image's manifest version differs from the version built into machined: build images with `make image VERSION=...`",
					zap.String("manifest", v[meta.UpgradeTo]), zap.String("machined", version.Tag))
			}
		}
	})
}

// Upgrade verifies the image synchronously (a refused image changes nothing and the error goes
// to the caller), then runs the upgrade in the background. It returns the acknowledgement.
func (m *Manager) Upgrade(ctx context.Context, req *machine.UpgradeRequest, actor string) (string, error) {
	if err := m.needSlots(); err != nil {
		return "", err
	}

	if req.Image == "" || !filepath.IsAbs(req.Image) {
		return "", status.Errorf(codes.InvalidArgument, "image %q: give the absolute path of a signed image file on the node's host (built with `make image VERSION=...`)", req.Image)
	}

	if req.RebootMode == machine.UpgradeRequest_POWERCYCLE && m.R.Platform == runtime.PlatformContainer {
		return "", status.Error(codes.InvalidArgument, "powercycle needs real hardware: use the default reboot mode in container mode")
	}

	cp := m.Node.IsControlPlane()

	if req.Stage && !req.Preserve && cp {
		return "", status.Error(codes.InvalidArgument, "a staged upgrade of a control plane needs --preserve: etcd must be left before EPHEMERAL is wiped, which cannot wait for the next reboot; add --preserve or drop --stage")
	}

	if !m.busy.TryLock() {
		return "", errBusy
	}

	release := true
	defer func() {
		if release {
			m.busy.Unlock()
		}
	}()

	keys, err := m.TrustedKeys()
	if err != nil {
		return "", status.Errorf(codes.FailedPrecondition, "%v", err)
	}

	target := bootloader.Other(m.Slot)
	staging := filepath.Join(m.R.Paths.Boot(), ".staging-"+target)

	if err = os.RemoveAll(staging); err != nil {
		return "", status.Errorf(codes.Internal, "clearing %s: %v", staging, err)
	}

	man, err := imager.Extract(req.Image, keys, staging)
	if err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, os.ErrNotExist) {
			code = codes.NotFound
		}

		return "", status.Errorf(code, "upgrade refused, nothing was changed: %v", err)
	}

	log := m.log().With(zap.String("actor", actor), zap.String("from", version.Tag), zap.String("to", man.Version), zap.String("slot", target))
	log.Info("image verified", zap.String("image", req.Image), zap.Bool("preserve", req.Preserve), zap.Bool("stage", req.Stage))

	release = false

	m.spawn(func(ctx context.Context) {
		defer m.busy.Unlock()

		// Progress is published as events too, so `talosctl events --actor-id` can follow it.
		m.R.Events.Publish(&machine.SequenceEvent{Sequence: "upgrade", Action: machine.SequenceEvent_START}, actor)

		milestones := log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewTee(c, &eventCore{publish: func(msg string) {
				m.R.Events.Publish(&machine.PhaseEvent{Phase: msg, Action: machine.PhaseEvent_STOP}, actor)
			}})
		}))

		err := m.run(ctx, milestones, req, man, staging, target, cp)

		done := &machine.SequenceEvent{Sequence: "upgrade", Action: machine.SequenceEvent_STOP}
		if err != nil {
			log.Error("upgrade failed", zap.Error(err))
			done.Error = &common.Error{Code: common.Code_FATAL, Message: err.Error()}
		}

		m.R.Events.Publish(done, actor)
	})

	if req.Stage {
		return fmt.Sprintf("Upgrade to %s staged: it is applied on the next reboot", man.Version), nil
	}

	return fmt.Sprintf("Upgrade request received: upgrading to %s", man.Version), nil
}

func (m *Manager) run(ctx context.Context, log *zap.Logger, req *machine.UpgradeRequest, man *imager.Manifest, staging, target string, cp bool) (err error) {
	defer os.RemoveAll(staging)

	store, err := m.meta()
	if err != nil {
		return err
	}

	if cp {
		unlock, err := m.etcdChecks(ctx, log, req.Preserve, req.Force)
		if err != nil {
			return err
		}

		// On success the lock is held through the reboot and lapses with this process.
		defer func() {
			if err != nil || req.Stage {
				unlock()
			}
		}()
	}

	log.Info("cordon and drain skipped: Kubernetes is not present on this node")

	// Write the verified image to the inactive slot and check it there, while the node still
	// runs: the slot is not in use, and a failure here leaves the node as it was.
	if err = m.writeSlot(staging, target); err != nil {
		return err
	}

	keys, err := m.TrustedKeys()
	if err != nil {
		return err
	}

	if _, err = imager.VerifyDir(bootloader.SlotDir(m.R.Paths.Boot(), target), keys); err != nil {
		return fmt.Errorf("slot %s after writing: %w", target, err)
	}

	log.Info("image written to the inactive slot and verified")

	if req.Stage {
		if err = store.Set(meta.BootOnce, target, meta.UpgradeFrom, version.Tag, meta.UpgradeTo, man.Version,
			meta.WipeEphemeral, boolKey(!req.Preserve)); err != nil {
			return err
		}

		log.Info("upgrade staged: the next reboot boots the new slot once")

		return nil
	}

	if cp && !req.Preserve {
		if m.Etcd == nil {
			log.Warn("etcd is not wired into this machined: not leaving etcd before wiping EPHEMERAL")
		} else {
			// Recorded before leaving: the next control plane waits for this one to be back.
			if err = m.Etcd.MarkRejoining(ctx, m.R.Address); err != nil {
				return fmt.Errorf("recording the etcd rejoin: %w", err)
			}

			if err = m.Etcd.Leave(ctx); err != nil {
				m.Etcd.Rejoined(ctx, m.R.Address) //nolint:errcheck // still a member: nothing to wait for

				return fmt.Errorf("leaving etcd: %w", err)
			}

			log.Info("left etcd: it rejoins after the reboot")
		}
	}

	if err = m.Node.StopServices(ctx); err != nil {
		// Services may be half stopped: reboot into the current slot rather than run degraded.
		log.Error("stopping services failed: rebooting into the current version", zap.Error(err))
		m.Node.Reboot() //nolint:errcheck // a failed reboot leaves the node running the old slot, which the state already says

		return err
	}

	log.Info("services stopped")

	if !req.Preserve {
		if err = bootloader.WipeFolder(m.R.Paths.Root, filepath.Base(m.R.Paths.Ephemeral())); err != nil {
			log.Error("wiping EPHEMERAL failed: rebooting into the current version", zap.Error(err))
			m.Node.Reboot() //nolint:errcheck // a failed reboot leaves the node running the old slot, which the state already says

			return err
		}

		log.Info("EPHEMERAL wiped")
	}

	if err = store.Set(meta.BootOnce, target, meta.UpgradeFrom, version.Tag, meta.UpgradeTo, man.Version); err != nil {
		log.Error("setting boot-once failed: rebooting into the current version", zap.Error(err))
		m.Node.Reboot() //nolint:errcheck // a failed reboot leaves the node running the old slot, which the state already says

		return err
	}

	log.Info("boot-once set: rebooting into the new version")

	return m.Node.Reboot()
}

func boolKey(b bool) string {
	if b {
		return "1"
	}

	return ""
}

// etcdChecks takes the upgrade lock and waits until etcd is healthy without this node.
func (m *Manager) etcdChecks(ctx context.Context, log *zap.Logger, preserve, force bool) (func(), error) {
	if m.Etcd == nil {
		log.Warn("etcd is not wired into this machined: upgrading this control plane without the etcd health check and upgrade lock")

		return func() {}, nil
	}

	ctx, cancel := context.WithTimeout(ctx, m.StepTimeout)
	defer cancel()

	log.Info("waiting for the etcd upgrade lock")

	hostname, _ := os.Hostname()

	unlock, err := m.Etcd.Lock(ctx, m.R.Address+" "+hostname)
	if err != nil {
		return nil, err
	}

	if force {
		log.Warn("etcd upgrade lock taken; --force: skipping the etcd health check")

		return unlock, nil
	}

	log.Info("etcd upgrade lock taken; checking that etcd stays healthy without this node")

	for {
		err = m.othersRejoining(ctx)
		if err == nil {
			err = m.Etcd.CheckHealthyWithout(ctx)
		}

		if err == nil || (preserve && errors.Is(err, ErrLastMember)) {
			return unlock, nil
		}

		if errors.Is(err, ErrLastMember) {
			unlock()

			return nil, err
		}

		log.Info("etcd is not yet healthy without this node; waiting", zap.Error(err))

		select {
		case <-ctx.Done():
			unlock()

			return nil, fmt.Errorf("etcd did not become healthy without this node: %w", err)
		case <-time.After(2 * time.Second):
		}
	}
}

// othersRejoining fails while another control plane that left etcd for its upgrade has not
// rejoined: the cluster is a member short until then.
func (m *Manager) othersRejoining(ctx context.Context) error {
	nodes, err := m.Etcd.Rejoining(ctx)
	if err != nil {
		return fmt.Errorf("reading etcd rejoin records: %w", err)
	}

	nodes = slices.DeleteFunc(nodes, func(n string) bool { return n == m.R.Address })
	if len(nodes) > 0 {
		return fmt.Errorf("control planes %v left etcd for their upgrade and have not rejoined yet", nodes)
	}

	return nil
}

// writeSlot replaces the target slot with the staged image: the old slot is renamed aside, the
// staged folder renamed in, and the old one removed. At any crash point BOOT holds the current
// slot intact, and META does not point at the target yet.
func (m *Manager) writeSlot(staging, target string) error {
	boot := m.R.Paths.Boot()
	dest := bootloader.SlotDir(boot, target)
	old := filepath.Join(boot, ".old-"+target)

	if err := os.RemoveAll(old); err != nil {
		return err
	}

	if _, err := os.Stat(dest); err == nil {
		if err = os.Rename(dest, old); err != nil {
			return fmt.Errorf("moving old slot %s aside: %w", target, err)
		}
	}

	if err := os.Rename(staging, dest); err != nil {
		return fmt.Errorf("writing slot %s: %w", target, err)
	}

	if err := meta.SyncDir(boot); err != nil {
		return err
	}

	return os.RemoveAll(old)
}

// Rollback makes the other slot active again and reboots into it.
func (m *Manager) Rollback(context.Context) error {
	if err := m.needSlots(); err != nil {
		return err
	}

	if !m.busy.TryLock() {
		return errBusy
	}
	defer m.busy.Unlock()

	other := bootloader.Other(m.Slot)
	dir := bootloader.SlotDir(m.R.Paths.Boot(), other)

	if !bootloader.SlotInstalled(m.R.Paths.Boot(), other) {
		return status.Errorf(codes.FailedPrecondition, "no previous version to roll back to: slot %s is empty (the node has not been upgraded)", other)
	}

	prev := "unknown"

	if _, err := os.Stat(filepath.Join(dir, imager.ManifestName)); err == nil {
		keys, err := m.TrustedKeys()
		if err != nil {
			return status.Errorf(codes.FailedPrecondition, "%v", err)
		}

		man, err := imager.VerifyDir(dir, keys)
		if err != nil {
			return status.Errorf(codes.FailedPrecondition, "rollback refused, nothing was changed: slot %s: %v", other, err)
		}

		prev = man.Version
	}

	store, err := m.meta()
	if err != nil {
		return err
	}

	if err = store.Set(meta.ActiveSlot, other, meta.BootOnce, "", meta.TrialSlot, "", meta.WipeEphemeral, "",
		meta.UpgradeFrom, version.Tag, meta.UpgradeTo, prev); err != nil {
		return status.Errorf(codes.Internal, "rollback: %v", err)
	}

	m.log().Info("rollback: slot is active again, rebooting", zap.String("slot", other), zap.String("version", prev))

	return m.Node.Reboot()
}

// Partitions a reset may wipe in container mode, and the default set.
var (
	resettable   = map[string]bool{"STATE": true, "EPHEMERAL": true}
	defaultReset = []string{"STATE", "EPHEMERAL"}
)

// Reset validates the request synchronously, then wipes and reboots or shuts down.
func (m *Manager) Reset(ctx context.Context, req *machine.ResetRequest, actor string) error {
	if len(req.UserDisksToWipe) > 0 || req.Mode == machine.ResetRequest_USER_DISKS {
		return status.Error(codes.InvalidArgument, "container mode has no user disks: reset only the system partitions (STATE, EPHEMERAL)")
	}

	wipe := []string{}

	for _, p := range req.SystemPartitionsToWipe {
		if !resettable[p.Label] {
			return status.Errorf(codes.InvalidArgument, "partition %q cannot be wiped: choose STATE and/or EPHEMERAL", p.Label)
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

	m.spawn(func(ctx context.Context) {
		defer m.busy.Unlock()

		m.R.Events.Publish(&machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_START}, actor)

		err := m.reset(ctx, log, req, wipe, cp, leave)

		done := &machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_STOP}
		if err != nil {
			log.Error("reset failed", zap.Error(err))
			done.Error = &common.Error{Code: common.Code_FATAL, Message: err.Error()}
		}

		m.R.Events.Publish(done, actor)
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
		return false, status.Error(codes.FailedPrecondition, "reset refused, nothing was changed: this node is the only etcd voting member and leaving would lose the cluster's data; reset it with --graceful=false, or add control planes first")
	default:
		return false, status.Errorf(codes.FailedPrecondition, "reset refused, nothing was changed: leaving etcd now would risk quorum: %v; wait until the other members are healthy, or reset with --graceful=false to skip leaving etcd", err)
	}
}

func (m *Manager) reset(ctx context.Context, log *zap.Logger, req *machine.ResetRequest, wipe []string, cp, leave bool) error {
	log.Info("reset started")

	if req.Graceful {
		log.Info("cordon and drain skipped: Kubernetes is not present on this node")

		switch {
		case !cp:
		case m.Etcd == nil:
			log.Warn("etcd is not wired into this machined: not leaving etcd")
		case !leave:
			log.Info("etcd does not run on this node: nothing to leave")
		default:
			if err := m.Etcd.Leave(ctx); err != nil {
				return fmt.Errorf("leaving etcd (use a non-graceful reset to skip): %w", err)
			}

			log.Info("left etcd")
		}
	}

	if err := m.Node.StopServices(ctx); err != nil {
		log.Warn("stopping services", zap.Error(err))
	}

	var wipeErr error

	for _, label := range wipe {
		if err := bootloader.WipeFolder(m.R.Paths.Root, label); err != nil {
			// Services are stopped already: still carry out the power action, and report.
			wipeErr = errors.Join(wipeErr, fmt.Errorf("wiping %s: %w", label, err))

			continue
		}

		log.Info("wiped", zap.String("partition", label))
	}

	power := m.Node.Shutdown
	if req.Reboot {
		power = m.Node.Reboot
	}

	return errors.Join(wipeErr, power())
}

// eventCore turns each info-level log line of an upgrade into a milestone event, whatever the
// level of the node's own log.
type eventCore struct {
	publish func(msg string)
}

func (c *eventCore) Enabled(l zapcore.Level) bool      { return l == zapcore.InfoLevel }
func (c *eventCore) With([]zapcore.Field) zapcore.Core { return c }
func (c *eventCore) Sync() error                       { return nil }

func (c *eventCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}

	return ce
}

func (c *eventCore) Write(e zapcore.Entry, _ []zapcore.Field) error {
	c.publish(e.Message)

	return nil
}
