// Package configsupport says, for every field and document of the machine config (machinery
// v1.11.0's types), what this node does with it: honours it (naming the test that proves it),
// refuses a config that sets it (naming the field and the fix), or ignores it by design (with the
// reason). The same rules refuse configs (Check) and write docs/config-coverage.md (Table), so
// the table a user reads is the behaviour the node has.
package configsupport

import (
	"encoding"
	"reflect"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/config/types/hardware"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime/extensions"
	"github.com/siderolabs/talos/pkg/machinery/config/types/security"
	"github.com/siderolabs/talos/pkg/machinery/config/types/siderolink"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"gopkg.in/yaml.v3"
)

// V1Alpha1 is the kind under which the v1alpha1 document's fields are listed: its paths start at
// its own top level (machine.…, cluster.…), as users write them.
const V1Alpha1 = "v1alpha1"

// Documents are the prototypes of every document kind machinery registers, by kind. A test
// checks the list against machinery's schema, so a kind added there cannot be missed here.
var Documents = map[string]config.Document{
	V1Alpha1:                       &v1alpha1.Config{},
	block.ExistingVolumeConfigKind: block.NewExistingVolumeConfigV1Alpha1(),
	block.RawVolumeConfigKind:      block.NewRawVolumeConfigV1Alpha1(),
	block.SwapVolumeConfigKind:     block.NewSwapVolumeConfigV1Alpha1(),
	block.UserVolumeConfigKind:     block.NewUserVolumeConfigV1Alpha1(),
	block.VolumeConfigKind:         block.NewVolumeConfigV1Alpha1(),
	block.ZswapConfigKind:          block.NewZswapConfigV1Alpha1(),
	extensions.ServiceConfigKind:   extensions.NewServicesConfigV1Alpha1(),
	hardware.PCIDriverRebindConfig: hardware.NewPCIDriverRebindConfigV1Alpha1(),
	network.DefaultActionConfig:    network.NewDefaultActionConfigV1Alpha1(),
	network.EthernetKind:           network.NewEthernetConfigV1Alpha1(""),
	network.KubespanEndpointsKind:  network.NewKubespanEndpointsV1Alpha1(),
	network.RuleConfigKind:         network.NewRuleConfigV1Alpha1(),
	runtime.EventSinkKind:          runtime.NewEventSinkV1Alpha1(),
	runtime.KmsgLogKind:            runtime.NewKmsgLogV1Alpha1(),
	runtime.WatchdogTimerKind:      runtime.NewWatchdogTimerV1Alpha1(),
	security.TrustedRootsConfig:    security.NewTrustedRootsConfigV1Alpha1(),
	siderolink.Kind:                siderolink.NewConfigV1Alpha1(),
}

// Fields lists every field path of every document kind, leaves only: the v1alpha1 document's
// paths as written (machine.kernel.modules[].name), other kinds' prefixed with the kind
// (VolumeConfig.provisioning.minSize). `[]` stands for a list's items and `.*` for a map's keys.
func Fields() []string {
	var out []string

	for _, kind := range Kinds() {
		out = append(out, FieldsOf(kind)...)
	}

	return out
}

// FieldsOf lists one document kind's field paths.
func FieldsOf(kind string) []string {
	var out []string

	prefix := kind
	if kind == V1Alpha1 {
		prefix = ""
	}

	walkType(reflect.TypeOf(Documents[kind]), prefix, map[reflect.Type]bool{}, &out)

	return out
}

// Kinds lists the document kinds, v1alpha1 first, then by name.
func Kinds() []string {
	kinds := []string{V1Alpha1}

	for kind := range Documents {
		if kind != V1Alpha1 {
			kinds = append(kinds, kind)
		}
	}

	slices.Sort(kinds[1:])

	return kinds
}

var (
	yamlMarshaler = reflect.TypeFor[yaml.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	metaType      = reflect.TypeFor[meta.Meta]()
)

// leaf reports whether a type is one value in YAML: a scalar, or a type that marshals itself
// (sizes, certificates, URLs, free-form objects).
func leaf(t reflect.Type) bool {
	if t.Implements(yamlMarshaler) || reflect.PointerTo(t).Implements(yamlMarshaler) ||
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return true
	}

	switch t.Kind() {
	case reflect.Struct:
		// A struct outside the config types (a certificate, a URL), or a free-form object (one
		// inline map, as v1alpha1.Unstructured).
		if !strings.HasPrefix(t.PkgPath(), "github.com/siderolabs/talos/pkg/machinery/config/types") {
			return true
		}

		// A struct without fields is present or not (an encryption key's nodeID: {}).
		if t.NumField() == 0 {
			return true
		}

		return t.NumField() == 1 && t.Field(0).Type.Kind() == reflect.Map && strings.Contains(t.Field(0).Tag.Get("yaml"), "inline")
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8
	case reflect.Interface:
		return true
	default:
		return t.Kind() != reflect.Map && t.Kind() != reflect.Pointer
	}
}

// field is one struct field's YAML name; "" for fields YAML never shows, and inline for an
// embedded struct whose fields are its parent's.
func field(f reflect.StructField) (name string, inline bool) {
	if !f.IsExported() || f.Type == metaType {
		return "", false
	}

	tag := strings.Split(f.Tag.Get("yaml"), ",")
	if tag[0] == "-" {
		return "", false
	}

	if tag[0] == "" && (f.Anonymous || slices.Contains(tag[1:], "inline")) {
		return "", true
	}

	if tag[0] == "" {
		return f.Name, false
	}

	return tag[0], false
}

func join(path, name string) string {
	if path == "" {
		return name
	}

	return path + "." + name
}

func walkType(t reflect.Type, path string, seen map[reflect.Type]bool, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}

	if leaf(t) {
		*out = append(*out, path)

		return
	}

	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		walkType(t.Elem(), path+"[]", seen, out)
	case reflect.Map:
		walkType(t.Elem(), path+".*", seen, out)
	case reflect.Struct:
		if seen[t] { // a recursive type is one value here
			*out = append(*out, path)

			return
		}

		seen[t] = true
		defer delete(seen, t)

		for i := range t.NumField() {
			f := t.Field(i)

			name, inline := field(f)

			switch {
			case inline:
				walkType(f.Type, path, seen, out)
			case name != "":
				walkType(f.Type, join(path, name), seen, out)
			}
		}
	default:
		*out = append(*out, path)
	}
}
