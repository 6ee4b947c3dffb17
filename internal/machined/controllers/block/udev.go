package block

import (
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

	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/udev"
)

// UdevController is a metal node's udevd (internal/udev): it publishes the block devices
// (block.Device) from sysfs and keeps them current from the kernel's uevents, bumping a
// device's generation on each of its events; a device added with a modalias gets its module.
type UdevController struct {
	Sysfs        string                         // "/sys"
	LoadModalias func(string) ([]string, error) // nil: modules are not loaded
}

// Name implements controller.Controller.
func (ctrl *UdevController) Name() string { return "block.UdevController" }

// Inputs implements controller.Controller.
func (ctrl *UdevController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *UdevController) Outputs() []controller.Output {
	return []controller.Output{{Type: block.DeviceType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *UdevController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	// Without uevents (a nil channel) the devices are read once.
	events, stop, err := udev.Subscribe(ctx)
	if err != nil {
		log.Warn("no uevents: block devices are read once", zap.Error(err))
	}

	defer stop()

	generations := map[string]int{}

	for {
		if err = ctrl.publish(ctx, r, generations); err != nil {
			return err
		}

		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if alias := ev.Env["MODALIAS"]; alias != "" && ev.Action == "add" && ctrl.LoadModalias != nil {
				if loaded, err := ctrl.LoadModalias(alias); err != nil {
					log.Warn("loading a new device's module", zap.String("modalias", alias), zap.Error(err))
				} else if len(loaded) > 0 {
					log.Info("loaded modules for a new device", zap.String("modalias", alias), zap.Strings("modules", loaded))
				}
			}

			if ev.Env["SUBSYSTEM"] == "block" && ev.Env["DEVNAME"] != "" {
				generations[filepath.Base(ev.Env["DEVNAME"])]++
			}
		}
	}
}

func (ctrl *UdevController) publish(ctx context.Context, r controller.Runtime, generations map[string]int) error {
	devs, err := partition.Devices(ctrl.Sysfs)
	if err != nil {
		return err
	}

	r.StartTrackingOutputs()

	for _, d := range devs {
		dir := filepath.Join(ctrl.Sysfs, "class", "block", d.Name)
		major, minor, _ := strings.Cut(readString(filepath.Join(dir, "dev")), ":")
		path, _ := filepath.EvalSymlinks(dir)

		if err = safe.WriterModify(ctx, r, block.NewDevice(block.NamespaceName, d.Name), func(res *block.Device) error {
			spec := res.TypedSpec()
			spec.Type = "disk"
			spec.Major, _ = strconv.Atoi(major)
			spec.Minor, _ = strconv.Atoi(minor)
			spec.DevicePath = path
			spec.Generation = generations[d.Name]
			spec.Parent, spec.PartitionName, spec.PartitionNumber = "", "", 0

			if d.Disk != "" {
				spec.Type, spec.Parent, spec.PartitionName = "partition", d.Disk, d.PartName
				spec.PartitionNumber, _ = strconv.Atoi(d.PartN)
			}

			return nil
		}); err != nil {
			return fmt.Errorf("writing device %s: %w", d.Name, err)
		}
	}

	return safe.CleanupOutputs[*block.Device](ctx, r)
}

func readString(path string) string {
	b, _ := os.ReadFile(path)

	return strings.TrimSpace(string(b))
}
