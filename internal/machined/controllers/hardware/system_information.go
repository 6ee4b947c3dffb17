// Package hardware observes the host's hardware into the machinery's hardware resources, so
// `talosctl get systeminformation` and `get cpus` answer, in maintenance mode too. On metal the
// data would come from SMBIOS; here it comes from what Linux exposes under /sys and /proc.
package hardware

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// SystemInformationController publishes the machine's DMI identity (vendor, product, serial,
// UUID). Fields Linux only shows to root stay empty for other users.
type SystemInformationController struct {
	// Root is the filesystem root to read from ("/" when empty; tests point it elsewhere).
	Root string
}

// Name implements controller.Controller.
func (ctrl *SystemInformationController) Name() string {
	return "hardware.SystemInformationController"
}

// Inputs implements controller.Controller.
func (ctrl *SystemInformationController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *SystemInformationController) Outputs() []controller.Output {
	return []controller.Output{{Type: hardware.SystemInformationType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *SystemInformationController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	dmi := filepath.Join(rootOf(ctrl.Root), "sys", "class", "dmi", "id")
	read := func(name string) string { return readTrimmed(filepath.Join(dmi, name)) }

	if err := safe.WriterModify(ctx, r, hardware.NewSystemInformation(hardware.SystemInformationID), func(res *hardware.SystemInformation) error {
		spec := res.TypedSpec()
		spec.Manufacturer = read("sys_vendor")
		spec.ProductName = read("product_name")
		spec.Version = read("product_version")
		spec.SerialNumber = read("product_serial")
		spec.UUID = read("product_uuid")
		spec.SKUNumber = read("product_sku")

		return nil
	}); err != nil {
		return fmt.Errorf("writing system information: %w", err)
	}

	<-ctx.Done()

	return nil
}

func rootOf(root string) string {
	if root == "" {
		return "/"
	}

	return root
}

// readTrimmed returns a sysfs value, or "" when it is missing or unreadable.
func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}

	return strings.TrimSpace(string(b))
}
