package machined

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/install"
	blockctrl "github.com/talos-go/talos/internal/machined/controllers/block"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
)

// needsInstall tells a metal node that runs from memory (its STATE is not a disk's XFS) and has
// an install disk in its config.
func (n *node) needsInstall() bool {
	if !n.r.Mode.OwnsMachine() {
		return false
	}

	var st unix.Statfs_t
	if err := unix.Statfs(n.r.Paths.State(), &st); err != nil || st.Type == unix.XFS_SUPER_MAGIC {
		return false
	}

	if cfg := n.r.Config(); cfg == nil || cfg.Machine().Install().Disk() == "" && !hasDiskSelector(cfg.Machine().Install()) {
		n.r.Log.Warn("machine.install.disk and diskSelector are empty: the node runs from memory and keeps nothing across a reboot")

		return false
	}

	return true
}

// hasDiskSelector tells a config with machine.install.diskSelector (a bad one too: the install
// then says what is wrong with it).
func hasDiskSelector(i config.Install) bool {
	expr, err := i.DiskMatchExpression()

	return expr != nil || err != nil
}

// InstallToDisk installs the node to machine.install.disk, or the disk machine.install.diskSelector
// chooses (wiped first with machine.install.wipe): partitions, GRUB, slot A and STATE.
func (n *node) InstallToDisk(ctx context.Context) error {
	n.setMachineStage(n.owned.ctx, runtimeres.MachineStageInstalling, false)

	cfg := n.r.Config()
	if cfg == nil {
		return errors.New("no config")
	}

	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}

	log := n.r.Log.Named("install")

	enc := map[string]*encryption.Spec{}

	for _, label := range []string{partition.State, partition.Ephemeral} {
		if enc[label], err = encryption.FromConfig(cfg, label); err != nil {
			return err
		}

		if enc[label] == nil {
			delete(enc, label)
		}
	}

	ephemeral, err := install.EphemeralSizeFromConfig(cfg)
	if err != nil {
		return err
	}

	disks, err := blockctrl.ReadDisks("/")
	if err != nil {
		return err
	}

	disk, err := install.ChooseDisk(cfg.Machine().Install(), disks)
	if err != nil {
		return err
	}

	if disk != cfg.Machine().Install().Disk() {
		log.Info("machine.install.diskSelector chose " + disk)
	}

	err = install.ToDisk(ctx, install.Options{
		Disk:       disk,
		Wipe:       cfg.Machine().Install().Zero(),
		Initramfs:  container.InitramfsDir,
		State:      n.r.Paths.State(),
		Cmdline:    install.Cmdline(string(cmdline), cfg.Machine().Install().ExtraKernelArgs()),
		Encryption: enc,
		Ephemeral:  ephemeral,
		NodeUUID:   metal.SystemUUID(),
		Log:        func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return err
	}

	log.Info("installed: rebooting from the disk")

	return nil
}
