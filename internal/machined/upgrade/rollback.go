package upgrade

import (
	"context"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/errkind"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/version"
)

// Rollback makes the other slot active again and reboots into it.
func (m *Manager) Rollback(context.Context) error {
	if err := m.needSlots(); err != nil {
		return err
	}

	if !m.busy.TryLock() {
		return errBusy
	}
	defer m.busy.Unlock()

	other := slots.Other(m.Slot)
	dir := slots.Dir(m.R.Paths.Boot(), other)

	if !m.slotInstalled(other) {
		return errkind.Errorf(errkind.Precondition, "no previous version to roll back to: slot %s is empty (the node has not been upgraded)", other)
	}

	prev := "unknown"

	if _, err := os.Stat(filepath.Join(dir, imager.ManifestName)); err == nil {
		keys, err := m.TrustedKeys()
		if err != nil {
			return errkind.Wrap(errkind.Precondition, err)
		}

		man, err := imager.VerifyDir(dir, keys)
		if err != nil {
			return errkind.Errorf(errkind.Precondition, "rollback refused, nothing was changed: slot %s: %w", other, err)
		}

		prev = man.Version
	}

	store, err := m.meta()
	if err != nil {
		return err
	}

	if err = store.Set(meta.ActiveSlot, other, meta.BootOnce, "", meta.TrialSlot, "", meta.WipeEphemeral, "",
		meta.UpgradeFrom, version.Tag, meta.UpgradeTo, prev); err != nil {
		return errkind.Errorf(errkind.Internal, "rollback: %w", err)
	}

	if err = m.setGRUBDefault(other); err != nil {
		store.Set(meta.ActiveSlot, m.Slot) //nolint:errcheck // GRUB still boots this slot: META says so again

		return errkind.Errorf(errkind.Internal, "rollback: %w", err)
	}

	m.log().Info("rollback: slot is active again, rebooting", zap.String("slot", other), zap.String("version", prev))

	return m.Node.Reboot()
}
