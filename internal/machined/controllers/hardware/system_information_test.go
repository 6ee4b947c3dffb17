package hardware_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	hardwarectrl "github.com/talos-go/talos/internal/machined/controllers/hardware"
)

func TestSystemInformation(t *testing.T) {
	root := t.TempDir()
	dmi := filepath.Join(root, "sys", "class", "dmi", "id")
	require.NoError(t, os.MkdirAll(dmi, 0o755))

	for name, value := range map[string]string{
		"sys_vendor":      "QEMU\n",
		"product_name":    "Standard PC (Q35 + ICH9, 2009)\n",
		"product_version": "pc-q35-8.2\n",
		"product_uuid":    "  4c4c4544-0042-3510-8052-b4c04f4e3732\n",
		// product_serial and product_sku are root-only on most machines: absent here.
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dmi, name), []byte(value), 0o644))
	}

	env := ctest.Start(t, &hardwarectrl.SystemInformationController{Root: root})

	ctest.AssertResource(env, hardware.SystemInformationID, func(r *hardware.SystemInformation, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal("QEMU", spec.Manufacturer)
		a.Equal("Standard PC (Q35 + ICH9, 2009)", spec.ProductName)
		a.Equal("pc-q35-8.2", spec.Version)
		a.Equal("4c4c4544-0042-3510-8052-b4c04f4e3732", spec.UUID)
		a.Empty(spec.SerialNumber)
		a.Empty(spec.SKUNumber)
	})
}

func TestSystemInformationWithoutDMI(t *testing.T) {
	// Machines without DMI (some ARM boards, containers without /sys) still answer, emptily.
	env := ctest.Start(t, &hardwarectrl.SystemInformationController{Root: t.TempDir()})

	ctest.AssertResource(env, hardware.SystemInformationID, func(r *hardware.SystemInformation, a *assert.Assertions) {
		a.Empty(r.TypedSpec().Manufacturer)
		a.Empty(r.TypedSpec().UUID)
	})
}
