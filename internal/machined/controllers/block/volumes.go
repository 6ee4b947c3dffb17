package block

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/udev"
)

// DiscoveredVolumesController probes the block devices whenever udevd reports a change: one
// DiscoveredVolume per device (what it holds: partition table, filesystem, labels) and the
// /dev/disk/by-* links, published as Symlink resources.
type DiscoveredVolumesController struct {
	Sysfs, Dev string // "/sys", "/dev"
	Links      string // where the disk/by-* links go: Dev when empty (tests point it elsewhere)
}

// Name implements controller.Controller.
func (ctrl *DiscoveredVolumesController) Name() string { return "block.DiscoveredVolumesController" }

// Inputs implements controller.Controller.
func (ctrl *DiscoveredVolumesController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: block.NamespaceName, Type: block.DeviceType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *DiscoveredVolumesController) Outputs() []controller.Output {
	return []controller.Output{
		{Type: block.DiscoveredVolumeType, Kind: controller.OutputExclusive},
		{Type: block.SymlinkType, Kind: controller.OutputExclusive},
	}
}

// Run implements controller.Controller.
func (ctrl *DiscoveredVolumesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		vols, err := udev.Volumes(ctrl.Sysfs, ctrl.Dev)
		if err != nil {
			return err
		}

		// The links first: a Symlink resource says its links are there.
		links, paths := map[string]string{}, map[string][]string{}

		for _, v := range vols {
			for _, l := range udev.Links(v, ctrl.Sysfs) {
				links[l] = v.Name
				paths[v.Name] = append(paths[v.Name], "/dev/"+l)
			}
		}

		linkDir := ctrl.Links
		if linkDir == "" {
			linkDir = ctrl.Dev
		}

		if err = udev.SyncLinks(linkDir, links); err != nil {
			log.Warn("/dev/disk links", zap.Error(err))
		}

		r.StartTrackingOutputs()

		for _, v := range vols {
			if err = safe.WriterModify(ctx, r, block.NewDiscoveredVolume(block.NamespaceName, v.Name), func(res *block.DiscoveredVolume) error {
				*res.TypedSpec() = volumeSpec(v)

				return nil
			}); err != nil {
				return fmt.Errorf("writing volume %s: %w", v.Name, err)
			}

			if err = safe.WriterModify(ctx, r, block.NewSymlink(block.NamespaceName, v.Name), func(res *block.Symlink) error {
				res.TypedSpec().Paths = paths[v.Name]

				return nil
			}); err != nil {
				return fmt.Errorf("writing the links of %s: %w", v.Name, err)
			}
		}

		if err = r.CleanupOutputs(ctx,
			resource.NewMetadata(block.NamespaceName, block.DiscoveredVolumeType, "", resource.VersionUndefined),
			resource.NewMetadata(block.NamespaceName, block.SymlinkType, "", resource.VersionUndefined)); err != nil {
			return err
		}
	}
}

func volumeSpec(v udev.Volume) block.DiscoveredVolumeSpec {
	s := block.DiscoveredVolumeSpec{
		DevPath: "/dev/" + v.Name, Type: v.Type, DevicePath: v.DevicePath, Parent: v.Parent,
		Size: v.Size, PrettySize: humanize.Bytes(v.Size), SectorSize: v.SectorSize, IOSize: v.IOSize,
		Name: v.Filesystem, UUID: v.UUID, Label: v.Label,
		BlockSize: uint32(v.SectorSize), FilesystemBlockSize: v.FilesystemBlockSize, ProbedSize: v.ProbedSize,
		PartitionUUID: v.PartitionUUID, PartitionType: v.PartitionType, PartitionLabel: v.PartitionLabel, PartitionIndex: v.PartitionIndex,
	}

	if v.Parent != "" {
		s.ParentDevPath = "/dev/" + v.Parent
	}

	return s
}
