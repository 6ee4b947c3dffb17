package configsupport

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/talos-go/talos/internal/udev"
)

// Check refuses a config that sets a field or document the node refuses: one error per field,
// naming its path as the user wrote it (machine.kernel.modules[0]), why, and what to do. Node ""
// checks the refusals that hold on every node (an offline `talosctl validate`). Fields set to
// their zero value (false, "", empty) are not set.
func Check(cfg config.Provider, node Node) error {
	var errs []error

	seen := map[string]bool{}

	for _, doc := range cfg.Documents() {
		kind, prefix := doc.Kind(), doc.Kind()
		if _, ok := doc.(*v1alpha1.Config); ok {
			kind, prefix = V1Alpha1, ""
		}

		name := prefix
		if n, ok := doc.(interface{ Name() string }); ok && n.Name() != "" {
			name = fmt.Sprintf("%s(%s)", kind, n.Name())
		}

		var top []string
		if name != "" {
			top = []string{name}
		}

		walkValue(reflect.ValueOf(doc), prefix, top, map[reflect.Type]bool{}, func(typePath string, valuePath []string) {
			r, ok := Lookup(typePath)
			if !ok || r.StatusOn(node) != RefusedField {
				return
			}

			at := cut(valuePath, r.Path)
			if seen[at] {
				return
			}

			seen[at] = true

			msg := fmt.Sprintf("%s: %s; %s", at, r.Refused, r.Fix)
			if len(r.On) > 0 {
				msg = fmt.Sprintf("%s: %s (on a %s node); %s", at, r.Refused, node, r.Fix)
			}

			errs = append(errs, errors.New(msg))
		})
	}

	errs = append(errs, checkUdevRules(cfg, node)...)

	return errors.Join(errs...)
}

// checkUdevRules refuses, where the node runs the rules, a udev rule its udevd does not know
// (a key it does not match or assign, a syntax error), naming the rule.
func checkUdevRules(cfg config.Provider, node Node) []error {
	if r, ok := Lookup("machine.udev.rules"); !ok || r.StatusOn(node) == RefusedField ||
		cfg.Machine() == nil || cfg.Machine().Udev() == nil {
		return nil
	}

	var errs []error

	for i, text := range cfg.Machine().Udev().Rules() {
		if _, err := udev.ParseText(text); err != nil {
			errs = append(errs, fmt.Errorf("machine.udev.rules[%d]: %w; write it with the keys this node's udevd knows, or remove it", i, err))
		}
	}

	return errs
}

// cut shortens a value path (machine.kernel.modules[0].name, as segments) to the refused rule's
// depth, with the item's index when the rule is a list (machine.kernel.modules[0]).
func cut(valuePath []string, rulePath string) string {
	want, n := segments(rulePath), 0
	out := ""

	for _, seg := range valuePath {
		index := strings.HasPrefix(seg, "[")
		if !index {
			if n == want {
				break
			}

			n++
		}

		out += seg
	}

	return strings.TrimPrefix(out, ".")
}

// splitPath splits a type path into segments, each with its separator: ".a", "[]", ".*".
func splitPath(p string) []string {
	var segs []string

	start := 0

	for i := 1; i < len(p); i++ {
		if p[i] == '.' || p[i] == '[' {
			segs = append(segs, p[start:i])
			start = i
		}
	}

	return append(segs, p[start:])
}

func segments(typePath string) int {
	n := 0
	for _, s := range splitPath(typePath) {
		if !strings.HasPrefix(s, "[") {
			n++
		}
	}

	return n
}

// walkValue calls set for every leaf of v that holds a non-zero value, with its type path
// (list items as [], map keys as .*) and its value path (list items as [i], keys by name).
func walkValue(v reflect.Value, typePath string, valuePath []string, seen map[reflect.Type]bool, set func(typePath string, valuePath []string)) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}

		v = v.Elem()
	}

	if v.Kind() == reflect.Struct && v.NumField() == 0 { // present through its pointer
		set(typePath, valuePath)

		return
	}

	if leaf(v.Type()) || seen[v.Type()] {
		if !v.IsZero() && (v.Kind() != reflect.Slice || v.Len() > 0) {
			set(typePath, valuePath)
		}

		return
	}

	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkValue(v.Index(i), typePath+"[]", with(valuePath, fmt.Sprintf("[%d]", i)), seen, set)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })

		for _, k := range keys {
			walkValue(v.MapIndex(k), typePath+".*", with(valuePath, "."+fmt.Sprint(k)), seen, set)
		}
	case reflect.Struct:
		seen[v.Type()] = true
		defer delete(seen, v.Type())

		for i := range v.NumField() {
			name, inline := field(v.Type().Field(i))

			switch {
			case inline:
				walkValue(v.Field(i), typePath, valuePath, seen, set)
			case name != "":
				walkValue(v.Field(i), join(typePath, name), with(valuePath, "."+name), seen, set)
			}
		}
	default:
		if !v.IsZero() {
			set(typePath, valuePath)
		}
	}
}

// with is path plus one segment, in a slice of its own (sibling fields share path's array).
func with(path []string, seg string) []string {
	return append(slices.Clip(path), seg)
}
