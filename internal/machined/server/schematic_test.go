package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/server"
	"github.com/talos-go/talos/internal/schematic"
)

// The booted slot's schematic is listed as upstream lists a factory image's: an extension named
// schematic whose version is the ID; a slot without one, or no slot, lists nothing.
func TestSyncSchematic(t *testing.T) {
	ctx := context.Background()
	boot := t.TempDir()

	for _, slot := range []string{"A", "B"} {
		os.MkdirAll(filepath.Join(boot, slot), 0o700)
	}

	os.WriteFile(filepath.Join(boot, "B", schematic.FileName), []byte("customization: {}\n"), 0o600)

	for _, tc := range []struct {
		slot string
		want string // the listed version, "" for none
	}{
		{"", ""},
		{"A", ""},
		{"B", schematic.VanillaID},
	} {
		st, err := resources.NewState(ctx)
		if err != nil {
			t.Fatal(err)
		}

		if err = server.SyncSchematic(ctx, st, boot, tc.slot); err != nil {
			t.Fatal(err)
		}

		list, err := safe.StateListAll[*runtimeres.ExtensionStatus](ctx, st)
		if err != nil {
			t.Fatal(err)
		}

		switch {
		case tc.want == "" && list.Len() != 0:
			t.Errorf("slot %q: %d extensions listed, want none", tc.slot, list.Len())
		case tc.want != "" && (list.Len() != 1 || list.Get(0).TypedSpec().Metadata.Name != "schematic" || list.Get(0).TypedSpec().Metadata.Version != tc.want):
			t.Errorf("slot %q: %d extensions listed, want schematic %s", tc.slot, list.Len(), tc.want)
		}
	}

	// A slot's schematic that does not read fails the sync: the node would hide what it runs.
	os.WriteFile(filepath.Join(boot, "A", schematic.FileName), []byte("customization: {bogus: 1}\n"), 0o600)

	st, _ := resources.NewState(ctx)
	if err := server.SyncSchematic(ctx, st, boot, "A"); err == nil {
		t.Error("a broken schematic was published")
	}
}
