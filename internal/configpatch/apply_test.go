package configpatch_test

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/talos-go/talos/internal/configpatch"
)

// TestApplyReplaceWithoutValue: the JSON patch library panics on a whole-document replace
// without a value (found by FuzzApplyConfig); Apply answers an error instead.
func TestApplyReplaceWithoutValue(t *testing.T) {
	patch, err := configpatcher.LoadPatch([]byte(`[{"op": "replace", "path": ""}]`))
	if err != nil {
		t.Fatal(err)
	}

	_, err = configpatch.Apply(configpatcher.WithBytes([]byte("version: v1alpha1\n")), []configpatcher.Patch{patch})
	if err == nil || !strings.Contains(err.Error(), "value") {
		t.Fatalf("want an error naming the missing value, got %v", err)
	}
}

func TestApplyGoodPatch(t *testing.T) {
	patch, err := configpatcher.LoadPatch([]byte(`[{"op": "add", "path": "/debug", "value": true}]`))
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatch.Apply(configpatcher.WithBytes([]byte("version: v1alpha1\n")), []configpatcher.Patch{patch})
	if err != nil {
		t.Fatal(err)
	}

	data, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(string(data), "debug: true") {
		t.Fatalf("patched config lacks debug: true:\n%s", data)
	}
}
