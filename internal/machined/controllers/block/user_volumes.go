package block

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/uservolume"
)

// UserVolumesController provisions the config's user-defined volumes on an installed metal
// node and reports each as a VolumeStatus: user volumes (UserVolumeConfig) u-<name> mounted at
// /var/mnt/<name>, swap volumes (SwapVolumeConfig) s-<name> swapped on, raw volumes
// (RawVolumeConfig) r-<name> made, existing volumes (ExistingVolumeConfig) e-<name> mounted at
// /var/mnt/<name>; each ready, or failed with why. A ready volume stays as it is until the next
// boot.
type UserVolumesController struct {
	StateDir string // the node's STATE (its salt, for keys locked to STATE)
}

// Name implements controller.Controller.
func (ctrl *UserVolumesController) Name() string { return "block.UserVolumesController" }

// Inputs implements controller.Controller.
func (ctrl *UserVolumesController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: block.NamespaceName, Type: block.DiskType, Kind: controller.InputWeak},
		// The disks' /dev/disk links (what selectors name) come after the disks.
		{Namespace: block.NamespaceName, Type: block.SymlinkType, Kind: controller.InputWeak},
		{Namespace: block.NamespaceName, Type: block.DiscoveredVolumeType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *UserVolumesController) Outputs() []controller.Output {
	return []controller.Output{{Type: block.VolumeStatusType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *UserVolumesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	ready := map[string]uservolume.Result{}

	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		if cfg == nil || len(uservolume.Volumes(cfg.Config()))+len(cfg.Config().ExistingVolumeConfigs()) == 0 {
			return nil
		}

		// Only a node running from its disk: until then /var is in memory, and an install may
		// be writing the disks.
		var st unix.Statfs_t
		if unix.Statfs(ctrl.StateDir, &st) != nil || st.Type != unix.XFS_SUPER_MAGIC {
			return nil //nolint:nilerr // not running from its disk yet: a later event looks again
		}

		devs, err := partition.Devices("/sys")
		if err != nil {
			return err
		}

		system := partition.Named(devs, partition.State)
		if system == nil {
			return nil
		}

		disks, err := safe.ReaderListAll[*block.Disk](ctx, r)
		if err != nil {
			return err
		}

		var list []uservolume.Disk

		for d := range disks.All() {
			spec := *d.TypedSpec()

			if links, err := safe.ReaderGetByID[*block.Symlink](ctx, r, d.Metadata().ID()); err == nil {
				spec.Symlinks = links.TypedSpec().Paths
			}

			list = append(list, uservolume.Disk{Name: d.Metadata().ID(), Spec: spec, System: d.Metadata().ID() == system[partition.State].Disk})
		}

		salt, _ := os.ReadFile(filepath.Join(ctrl.StateDir, encryption.SaltFile))

		for _, v := range uservolume.Volumes(cfg.Config()) {
			id := v.PartitionName()
			if _, ok := ready[id]; ok {
				continue
			}

			env := uservolume.Env{Sysfs: "/sys", Dev: "/dev", MountRoot: uservolume.MountRoot,
				Encryption: encryption.Env{NodeUUID: metal.SystemUUID(), Salt: salt},
				Log:        func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
				LoadModule: metal.LoadModule, EncryptionModules: metal.EncryptionModules}

			res, provErr := uservolume.Provision(ctx, v, list, env)

			failure := ""
			if provErr != nil {
				failure = provErr.Error()
				log.Warn("volume", zap.String("volume", id), zap.Error(provErr))
			}

			if err = safe.WriterModify(ctx, r, block.NewVolumeStatus(block.NamespaceName, id), func(s *block.VolumeStatus) error {
				spec := s.TypedSpec()
				spec.Type = block.VolumeTypePartition
				spec.Phase = block.VolumePhaseReady
				spec.ErrorMessage = ""

				if failure != "" {
					spec.Phase, spec.ErrorMessage = block.VolumePhaseFailed, failure

					return nil
				}

				spec.Location, spec.ParentLocation, spec.PartitionIndex = res.Partition, res.Disk, res.Index
				spec.MountLocation, spec.UUID = res.Device, res.UUID
				spec.SetSize(res.Size)

				switch v.Use {
				case uservolume.UseXFS:
					spec.Filesystem = block.FilesystemTypeXFS
					spec.MountSpec = block.MountSpec{TargetPath: res.MountPoint}
				case uservolume.UseSwap:
					spec.Filesystem = block.FilesystemTypeSwap
				case uservolume.UseRaw:
				}

				if res.Encrypted {
					spec.EncryptionProvider = block.EncryptionProviderLUKS2
				}

				ready[id] = res

				return nil
			}); err != nil {
				return err
			}
		}

		return ctrl.existing(ctx, r, cfg, ready, log)
	})
}

// existing mounts the config's existing volumes, each the first discovered volume its
// selector matches (in the devices' order), as it is.
func (ctrl *UserVolumesController) existing(ctx context.Context, r controller.Runtime, cfg *config.MachineConfig, ready map[string]uservolume.Result, log *zap.Logger) error {
	if len(cfg.Config().ExistingVolumeConfigs()) == 0 {
		return nil
	}

	vols, err := safe.ReaderListAll[*block.DiscoveredVolume](ctx, r)
	if err != nil {
		return err
	}

	var found []uservolume.Found

	for vol := range vols.All() {
		f := uservolume.Found{Volume: *vol.TypedSpec()}

		disk := vol.Metadata().ID()
		if p := f.Volume.ParentDevPath; p != "" {
			disk = filepath.Base(p)
		}

		if d, err := safe.ReaderGetByID[*block.Disk](ctx, r, disk); err == nil {
			f.Disk = *d.TypedSpec()
		}

		found = append(found, f)
	}

	for _, v := range cfg.Config().ExistingVolumeConfigs() {
		id := uservolume.ExistingPrefix + v.Name()
		if _, ok := ready[id]; ok {
			continue
		}

		f, err := uservolume.MatchExisting(v, found)

		target := ""
		if err == nil {
			target, err = uservolume.MountExisting(v, f, uservolume.Env{MountRoot: uservolume.MountRoot, LoadModule: metal.LoadModule})
		}

		failure := ""
		if err != nil {
			failure = err.Error()
			log.Warn("volume", zap.String("volume", id), zap.Error(err))
		}

		if err = safe.WriterModify(ctx, r, block.NewVolumeStatus(block.NamespaceName, id), func(s *block.VolumeStatus) error {
			spec := s.TypedSpec()
			spec.Type = block.VolumeTypePartition
			spec.Phase, spec.ErrorMessage = block.VolumePhaseReady, ""

			if failure != "" {
				spec.Phase, spec.ErrorMessage = block.VolumePhaseFailed, failure

				return nil
			}

			spec.Location, spec.ParentLocation, spec.PartitionIndex = f.Volume.DevPath, f.Volume.ParentDevPath, int(f.Volume.PartitionIndex)
			spec.MountLocation, spec.UUID, spec.PartitionUUID = f.Volume.DevPath, f.Volume.UUID, f.Volume.PartitionUUID
			spec.MountSpec = block.MountSpec{TargetPath: target}
			spec.Filesystem, _ = block.FilesystemTypeString(f.Volume.Name)
			spec.SetSize(f.Volume.Size)

			ready[id] = uservolume.Result{MountPoint: target}

			return nil
		}); err != nil {
			return err
		}
	}

	return nil
}
