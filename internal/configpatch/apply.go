// Package configpatch applies machine config patches (strategic merge or JSON 6902) as
// upstream's configpatcher does, but turns a panic inside the JSON patch library into an
// error: a JSON 6902 "replace" of the whole document without a "value" dereferences nil in
// evanphx/json-patch v5.9.11, and a user's bad patch must not crash talosctl.
package configpatch

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
)

// Apply is configpatcher.Apply that never panics.
func Apply(in configpatcher.Input, patches []configpatcher.Patch) (out configpatcher.Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("config patch cannot be applied (check each JSON patch operation has the fields its op needs: path, and value for add/replace/test): %v", r)
		}
	}()

	return configpatcher.Apply(in, patches)
}
