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

// UserVolumesController provisions the config's user volumes (UserVolumeConfig) on an
// installed metal node and reports each as a VolumeStatus u-<name>: ready and mounted at
// /var/mnt/<name>, or failed with why. A ready volume stays as it is until the next boot.
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
		if cfg == nil || len(cfg.Config().UserVolumeConfigs()) == 0 {
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

		for _, v := range cfg.Config().UserVolumeConfigs() {
			id := uservolume.PartitionName(v.Name())
			if _, ok := ready[id]; ok {
				continue
			}

			env := uservolume.Env{Sysfs: "/sys", Dev: "/dev", MountRoot: uservolume.MountRoot,
				Encryption: encryption.Env{NodeUUID: metal.SystemUUID(), Salt: salt},
				Log:        func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }}

			res, provErr := uservolume.Provision(ctx, v, list, env)

			failure := ""
			if provErr != nil {
				failure = provErr.Error()
				log.Warn("user volume", zap.String("volume", v.Name()), zap.Error(provErr))
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
				spec.MountSpec = block.MountSpec{TargetPath: res.MountPoint}
				spec.Filesystem = block.FilesystemTypeXFS
				spec.SetSize(res.Size)

				if res.Encrypted {
					spec.EncryptionProvider = block.EncryptionProviderLUKS2
				}

				ready[id] = res

				return nil
			}); err != nil {
				return err
			}
		}

		return nil
	})
}
