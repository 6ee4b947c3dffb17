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
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/errkind"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/sequencer"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
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

	return &Manager{R: r, Node: node, Slot: slots.Current(), StepTimeout: 10 * time.Minute, MustBeUp: []string{"etcd"}, ctx: ctx, cancel: cancel}
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

// metal reports whether this node boots with GRUB from its disk: its slots are kernels and
// initramfs images, and GRUB's menu follows META.
func (m *Manager) metal() bool { return m.R.Mode.OwnKernel() }

// slotInstalled reports whether a slot of BOOT holds what this kind of node boots.
func (m *Manager) slotInstalled(slot string) bool {
	if m.metal() {
		return slots.KernelSlotInstalled(m.R.Paths.Boot(), slot)
	}

	return bootloader.SlotInstalled(m.R.Paths.Boot(), slot)
}

// setGRUBDefault points GRUB at slot on metal (nothing to do elsewhere).
func (m *Manager) setGRUBDefault(slot string) error {
	if !m.metal() {
		return nil
	}

	return slots.SetGRUBDefault(m.R.Paths.Boot(), slot)
}

// TrustedKeys are the image keys this node trusts.
func (m *Manager) TrustedKeys() ([]ed25519.PublicKey, error) {
	return imager.NodeKeys(filepath.Join(m.R.Paths.Boot(), filepath.Base(bootloader.TrustedKeysPath)))
}

func (m *Manager) spawn(fn func(ctx context.Context)) {
	m.wg.Add(1)

	go func() {
		defer m.wg.Done()

		fn(m.ctx)
	}()
}

var errBusy = errkind.New(errkind.Precondition, "another upgrade, rollback or reset is in progress on this node: wait for it to finish")

func (m *Manager) needSlots() error {
	if m.Slot == "" && m.metal() {
		return errkind.New(errkind.Precondition, "this node runs from memory, not from an installed disk, so it has no A/B slots: install it first (machine.install.disk in its config)")
	}

	if m.Slot == "" && m.R.Mode.ContainerNode() {
		return errkind.New(errkind.Precondition, "a node in a container boots its image read-only from the host and has no A/B slots: upgrade is not available in container mode yet (it needs the launcher to boot a new image); recreate the cluster with the new image, or use `--provisioner process` nodes started through `machined boot`")
	}

	if m.Slot == "" {
		return errkind.New(errkind.Precondition, "this node was not started through the boot stage, so it has no A/B slots: start it with `machined boot --state DIR ...`")
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

	if store, err := m.meta(); err == nil {
		if v, err := store.Read(); err == nil && v[meta.TrialSlot] == m.Slot {
			m.setTrialCondition(fmt.Sprintf("slot %s is on trial: it becomes permanent once the services it needs (%s) are up",
				m.Slot, strings.Join(m.MustBeUp, ", ")))
		}
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

		done, err := slots.MarkBootSuccessful(store, m.Slot)
		if err != nil {
			m.log().Error("reporting a successful boot", zap.Error(err))

			return
		}

		if done {
			defer m.setTrialCondition("")

			if err = m.setGRUBDefault(m.Slot); err != nil {
				m.log().Error("pointing GRUB at the new slot: the next boot runs the previous one", zap.Error(err))
			}

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

	remote := strings.HasPrefix(req.Image, "http://") || strings.HasPrefix(req.Image, "https://") || isImageReference(req.Image)

	switch {
	case m.metal() && !remote:
		return "", errkind.Errorf(errkind.Invalid, "image %q: a metal node downloads its image: give an installer image reference, REGISTRY/REPOSITORY:TAG (built with `imager installer --push`), or its URL, http://HOST/talos-metal-vX.Y.Z.img (built with `make metal-image VERSION=...`)", req.Image)
	case !remote && (req.Image == "" || !filepath.IsAbs(req.Image)):
		return "", errkind.Errorf(errkind.Invalid, "image %q: give the absolute path of a signed image file on the node's host (built with `make image VERSION=...`), its http(s) URL, or an installer image reference REGISTRY/REPOSITORY:TAG", req.Image)
	}

	if req.RebootMode == machine.UpgradeRequest_POWERCYCLE && m.R.Mode.InContainer() {
		return "", errkind.New(errkind.Invalid, "powercycle needs real hardware: use the default reboot mode in container mode")
	}

	cp := m.Node.IsControlPlane()

	if req.Stage && !req.Preserve && cp {
		return "", errkind.New(errkind.Invalid, "a staged upgrade of a control plane needs --preserve: etcd must be left before EPHEMERAL is wiped, which cannot wait for the next reboot; add --preserve or drop --stage")
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
		return "", errkind.Wrap(errkind.Precondition, err)
	}

	target := slots.Other(m.Slot)
	staging := filepath.Join(m.R.Paths.Boot(), ".staging-"+target)

	if err = os.RemoveAll(staging); err != nil {
		return "", errkind.Errorf(errkind.Internal, "clearing %s: %w", staging, err)
	}

	man, err := m.extractImage(ctx, req.Image, keys, staging)
	if err == nil && man.Metal() != m.metal() {
		os.RemoveAll(staging)

		err = fmt.Errorf("%w: the image is for %s nodes and this is a %s node: build it with `make %s`", imager.ErrRefused,
			map[bool]string{true: "metal", false: "process"}[man.Metal()], m.R.Mode, map[bool]string{true: "metal-image", false: "image"}[m.metal()])
	}

	if err == nil && m.bootsUKI() {
		if err = m.checkPCRSignature(staging); err != nil {
			os.RemoveAll(staging)
		}
	}

	if err != nil {
		kind := errkind.Invalid
		if errors.Is(err, os.ErrNotExist) {
			kind = errkind.NotFound
		}

		return "", errkind.Errorf(kind, "upgrade refused, nothing was changed: %w", err)
	}

	log := m.log().With(zap.String("actor", actor), zap.String("from", version.Tag), zap.String("to", man.Version), zap.String("slot", target))
	log.Info("image verified", zap.String("image", req.Image), zap.Bool("preserve", req.Preserve), zap.Bool("stage", req.Stage))

	store, err := m.meta()
	if err != nil {
		os.RemoveAll(staging)

		return "", errkind.Errorf(errkind.Internal, "upgrade refused, nothing was changed: %w", err)
	}

	in := &install{m: m, req: req, man: man, store: store, staging: staging, target: target}

	// Progress is published as events too, so `talosctl events --actor-id` can follow it: the
	// sequence's phases and tasks, and each info line of the upgrade as a milestone.
	in.log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, &eventCore{publish: func(msg string) {
			m.R.Events.Publish(&machine.PhaseEvent{Phase: msg, Action: machine.PhaseEvent_STOP}, actor)
		}})
	}))

	seq := sequencer.Upgrade(in, sequencer.UpgradeOptions{ControlPlane: cp, Stage: req.Stage, Preserve: req.Preserve})

	release = false

	if !req.Stage {
		m.setStage(runtimeres.MachineStageUpgrading, false)
	}

	m.spawn(func(ctx context.Context) {
		defer m.busy.Unlock()

		err := seq.Run(ctx, m.R.Events, log, actor)
		if err != nil && !req.Stage {
			m.setStage(runtimeres.MachineStageRunning, true)
		}

		in.finish(err)
	})

	if req.Stage {
		return fmt.Sprintf("Upgrade to %s staged: it is applied on the next reboot", man.Version), nil
	}

	return fmt.Sprintf("Upgrade request received: upgrading to %s", man.Version), nil
}
