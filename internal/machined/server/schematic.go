package server

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/slots"
)

// SchematicExtensionName is the extension's name upstream's `talosctl get extensions` lists for
// the schematic an Image Factory image was built from; its version is the schematic's ID.
const SchematicExtensionName = "schematic"

// SyncSchematic publishes the schematic of the image this node booted (its slot's
// schematic.yaml) as upstream shows a factory image's: an ExtensionStatus named "schematic"
// whose version is the schematic's ID. A node booted from an image without a schematic (or not
// from a slot) has none, as an upstream image not built by the factory has none.
func SyncSchematic(ctx context.Context, st state.State, bootDir, slot string) error {
	if slot == "" {
		return nil
	}

	s, id, err := imager.ReadSlotSchematic(slots.Dir(bootDir, slot))
	if err != nil || s == nil {
		return err
	}

	// Upstream numbers its extensions' layers from 0 and lists the schematic's last; no other
	// extension is installed here, so it is the first.
	return safe.StateModify(ctx, st, runtimeres.NewExtensionStatus(runtimeres.NamespaceName, "0"), func(r *runtimeres.ExtensionStatus) error {
		*r.TypedSpec() = extensions.Layer{
			Image: "000.schematic.sqsh",
			Metadata: extensions.Metadata{
				Name:        SchematicExtensionName,
				Version:     id,
				Author:      "talos-go imager",
				Description: fmt.Sprintf("The schematic this image was built from (imager build --schematic): %d extra kernel arguments, %d META values.", len(s.Customization.ExtraKernelArgs), len(s.Customization.Meta)),
			},
		}

		return nil
	})
}
