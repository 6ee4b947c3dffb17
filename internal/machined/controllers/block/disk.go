// Package block observes the host's block devices into the machinery's Disk resources, so
// `talosctl get disks` answers (in maintenance mode too). Container mode only reads them.
package block

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"go.uber.org/zap"
)

// DiskController publishes one Disk per block device in /sys/block that has a size.
type DiskController struct {
	// Root is the filesystem root to read from ("/" when empty; tests point it elsewhere).
	Root string
}

// Name implements controller.Controller.
func (ctrl *DiskController) Name() string { return "block.DiskController" }

// Inputs implements controller.Controller.
func (ctrl *DiskController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *DiskController) Outputs() []controller.Output {
	return []controller.Output{{Type: block.DiskType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *DiskController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	root := ctrl.Root
	if root == "" {
		root = "/"
	}

	disks, err := ReadDisks(root)
	if err != nil {
		return err
	}

	for id, spec := range disks {
		if err := safe.WriterModify(ctx, r, block.NewDisk(block.NamespaceName, id), func(res *block.Disk) error {
			*res.TypedSpec() = spec

			return nil
		}); err != nil {
			return fmt.Errorf("writing disk %s: %w", id, err)
		}
	}

	<-ctx.Done()

	return nil
}

// ReadDisks reads the block devices under root/sys/block, by device name.
func ReadDisks(root string) (map[string]block.DiskSpec, error) {
	sysBlock := filepath.Join(root, "sys", "block")

	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}

	disks := map[string]block.DiskSpec{}

	for _, e := range entries {
		dir := filepath.Join(sysBlock, e.Name())
		read := func(rel string) string {
			b, err := os.ReadFile(filepath.Join(dir, rel))
			if err != nil {
				return ""
			}

			return strings.TrimSpace(string(b))
		}
		number := func(rel string) uint64 {
			n, _ := strconv.ParseUint(read(rel), 10, 64)

			return n
		}

		sectors := number("size") // always in 512-byte units
		if sectors == 0 {
			continue // an unattached loop device, an empty drive
		}

		spec := block.DiskSpec{
			DevPath:    "/dev/" + e.Name(),
			SectorSize: uint(number("queue/logical_block_size")),
			IOSize:     uint(number("queue/minimum_io_size")),
			Readonly:   read("ro") == "1",
			CDROM:      strings.HasPrefix(e.Name(), "sr"),
			Model:      read("device/model"),
			Serial:     cmp.Or(read("serial"), read("device/serial")),
			Modalias:   read("device/modalias"),
			WWID:       cmp.Or(read("wwid"), read("device/wwid")),
			Rotational: read("queue/rotational") == "1",
		}
		spec.SetSize(sectors * 512)

		if sub, err := filepath.EvalSymlinks(filepath.Join(dir, "device", "subsystem")); err == nil {
			spec.SubSystem = sub
		}

		if real, err := filepath.EvalSymlinks(dir); err == nil {
			// /sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda -> /pci0000:00/0000:00:02.0/virtio1
			if bus, _, ok := strings.Cut(strings.TrimPrefix(real, filepath.Join(root, "sys", "devices")), "/block/"); ok && bus != "/virtual" {
				spec.BusPath = bus
			}
		}

		if kind, _, ok := strings.Cut(spec.Modalias, ":"); ok {
			spec.Transport = kind
		} else if spec.SubSystem != "" {
			// An NVMe namespace's device is its controller, of class nvme, which has no modalias.
			spec.Transport = filepath.Base(spec.SubSystem)
		}

		disks[e.Name()] = spec
	}

	return disks, nil
}
