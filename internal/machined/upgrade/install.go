package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/sequencer"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/version"
)

// install is one upgrade in progress: the tasks of the upgrade sequence
// (sequencer.Upgrade) and what they hand each other.
type install struct {
	m       *Manager
	log     *zap.Logger // its info lines are also published as milestone events
	req     *machine.UpgradeRequest
	man     *imager.Manifest
	store   *meta.Store
	staging string // the verified image, extracted
	target  string // the inactive slot
	// metaValues are the META keys and values of the schematic the image carries, written
	// with boot-once (none without a schematic).
	metaValues []string

	unlock  func() // releases the etcd upgrade lock, once taken
	stopped bool   // services were asked to stop: a failure from here reboots into the current slot
}

var _ sequencer.Upgrader = (*install)(nil)

// finish cleans up after the sequence: the extracted image goes; the etcd lock is released
// unless the node reboots holding it (it lapses with this process); once services were
// stopped, a failure reboots into the current version rather than run degraded.
func (in *install) finish(err error) {
	os.RemoveAll(in.staging)

	if in.unlock != nil && (err != nil || in.req.Stage) {
		in.unlock()
	}

	if err != nil && in.stopped {
		in.log.Error("upgrade failed after services were stopped: rebooting into the current version", zap.Error(err))
		in.m.Node.Reboot() //nolint:errcheck // a failed reboot leaves the node running the old slot, which the state already says
	}
}

// LockEtcd implements sequencer.Upgrader.
func (in *install) LockEtcd(ctx context.Context) error {
	unlock, err := in.m.etcdChecks(ctx, in.log, in.req.Preserve, in.req.Force)
	if err != nil {
		return err
	}

	in.unlock = unlock

	return nil
}

// CordonAndDrain implements sequencer.Upgrader.
func (in *install) CordonAndDrain(ctx context.Context) error {
	err := in.m.cordonAndDrain(ctx, in.log)
	if err != nil && in.req.Force {
		in.log.Warn("upgrading without draining the node (--force)", zap.Error(err))

		return nil
	}

	if err != nil {
		return fmt.Errorf("%w (retry once the Kubernetes API answers, or upgrade with --force to skip the drain)", err)
	}

	return nil
}

// WriteSlot writes the verified image to the inactive slot and checks it there, while the
// node still runs: the slot is not in use, and a failure here leaves the node as it was.
func (in *install) WriteSlot(context.Context) error {
	if err := in.m.writeSlot(in.staging, in.target); err != nil {
		return err
	}

	if err := in.readSchematic(); err != nil {
		return err
	}

	if in.m.bootsUKI() {
		in.log.Info("building the unified kernel image of the new kernel and initramfs")

		if err := toUKI(slots.Dir(in.m.R.Paths.Boot(), in.target)); err != nil {
			os.RemoveAll(slots.Dir(in.m.R.Paths.Boot(), in.target)) // a kernel slot would not open this node's disks

			return fmt.Errorf("slot %s: %w", in.target, err)
		}
	}

	// A metal slot's files were checked as they arrived and synced (imager.ExtractFrom): reading
	// its 230 MB back would hash them again from the page cache, a minute under emulation.
	if in.m.metal() {
		in.log.Info("image written to the inactive slot")

		return nil
	}

	keys, err := in.m.TrustedKeys()
	if err != nil {
		return err
	}

	if _, err = imager.VerifyDir(slots.Dir(in.m.R.Paths.Boot(), in.target), keys); err != nil {
		return fmt.Errorf("slot %s after writing: %w", in.target, err)
	}

	in.log.Info("image written to the inactive slot and verified")

	return nil
}

// StageBootOnce implements sequencer.Upgrader.
func (in *install) StageBootOnce(context.Context) error {
	if err := in.store.Set(append([]string{meta.BootOnce, in.target, meta.UpgradeFrom, version.Tag, meta.UpgradeTo, in.man.Version,
		meta.WipeEphemeral, boolKey(!in.req.Preserve)}, in.metaValues...)...); err != nil {
		return err
	}

	if err := in.m.setGRUBDefault(in.target); err != nil {
		return err
	}

	in.log.Info("upgrade staged: the next reboot boots the new slot once")

	return nil
}

// LeaveEtcd implements sequencer.Upgrader.
func (in *install) LeaveEtcd(ctx context.Context) error {
	g := in.m.Etcd
	if g == nil {
		in.log.Warn("etcd is not wired into this machined: not leaving etcd before wiping EPHEMERAL")

		return nil
	}

	// Recorded before leaving: the next control plane waits for this one to be back.
	if err := g.MarkRejoining(ctx, in.m.R.Address); err != nil {
		return fmt.Errorf("recording the etcd rejoin: %w", err)
	}

	if err := g.Leave(ctx); err != nil {
		g.Rejoined(ctx, in.m.R.Address) //nolint:errcheck // still a member: nothing to wait for

		return fmt.Errorf("leaving etcd: %w", err)
	}

	in.log.Info("left etcd: it rejoins after the reboot")

	return nil
}

// StopServices implements sequencer.Upgrader.
func (in *install) StopServices(ctx context.Context) error {
	in.stopped = true

	if err := in.m.Node.StopServices(ctx); err != nil {
		return err
	}

	in.log.Info("services stopped")

	return nil
}

// WipeEphemeral implements sequencer.Upgrader.
func (in *install) WipeEphemeral(context.Context) error {
	// On metal EPHEMERAL is mounted and in use until the reboot: the new slot's initramfs
	// empties it before mounting it (slots.ChooseBooted), as it does for a staged upgrade.
	if in.m.metal() {
		if err := in.store.Set(meta.WipeEphemeral, "1"); err != nil {
			return err
		}

		in.log.Info("EPHEMERAL is wiped when the new slot boots")

		return nil
	}

	if err := bootloader.WipeFolder(in.m.R.Paths.Root, filepath.Base(in.m.R.Paths.Ephemeral())); err != nil {
		return err
	}

	in.log.Info("EPHEMERAL wiped")

	return nil
}

// SetBootOnce implements sequencer.Upgrader.
func (in *install) SetBootOnce(context.Context) error {
	if err := in.store.Set(append([]string{meta.BootOnce, in.target, meta.UpgradeFrom, version.Tag, meta.UpgradeTo, in.man.Version}, in.metaValues...)...); err != nil {
		return err
	}

	// GRUB boots the new slot next; its initramfs points GRUB back at this one while it is tried.
	if err := in.m.setGRUBDefault(in.target); err != nil {
		return err
	}

	in.log.Info("boot-once set: rebooting into the new version")

	return nil
}

// Reboot implements sequencer.Upgrader.
func (in *install) Reboot(context.Context) error {
	in.stopped = false // a failed reboot is not retried

	return in.m.Node.Reboot()
}

// readSchematic reads the schematic the written slot carries (its image's, under the image's
// signature): its META values are written with boot-once, as upstream's installer writes them
// when it installs an image of the factory; its extra kernel arguments go in the slot's GRUB
// entry (slots.SetGRUBDefault).
func (in *install) readSchematic() error {
	s, id, err := imager.ReadSlotSchematic(slots.Dir(in.m.R.Paths.Boot(), in.target))
	if err != nil || s == nil {
		return err
	}

	for _, v := range s.Customization.Meta {
		in.metaValues = append(in.metaValues, meta.TalosKey(v.Key), meta.TalosValue([]byte(v.Value)))
	}

	in.log.Info("the image carries schematic "+id, zap.Int("meta values", len(s.Customization.Meta)),
		zap.Strings("extra kernel arguments", s.Customization.ExtraKernelArgs))

	return nil
}

func boolKey(b bool) string {
	if b {
		return "1"
	}

	return ""
}

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
	dest := slots.Dir(boot, target)
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

	if err := atomicfile.SyncDir(boot); err != nil {
		return err
	}

	return os.RemoveAll(old)
}
