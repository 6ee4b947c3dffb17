// Package output renders COSI resources for `talosctl get` and friends: a table with the
// resource definition's print columns, YAML, JSON, and JSONPath templates (kubectl's syntax,
// through k8s.io/client-go/util/jsonpath, as upstream talosctl does).
package output

import (
	"fmt"
	"io"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"k8s.io/client-go/util/jsonpath"
)

// Writer renders resources of one type, possibly from several nodes.
type Writer interface {
	// WriteHeader is called before the first resource of each node; withEvents adds the event
	// of a watch to each resource.
	WriteHeader(rd *meta.ResourceDefinition, withEvents bool) error
	WriteResource(node string, r resource.Resource, event state.EventType) error
	Flush() error
}

// Formats are the values -o takes (the jsonpath ones followed by =TEMPLATE).
var Formats = []string{"table", "yaml", "json", "jsonpath", "jsonpath-as-json"}

// Help is the -o flag's description.
const Help = "output mode (json, table, yaml, jsonpath=TEMPLATE, jsonpath-as-json=TEMPLATE)"

// NewWriter returns the writer for an -o value.
func NewWriter(format string, w io.Writer) (Writer, error) {
	name, tmpl, hasTmpl := strings.Cut(format, "=")

	switch name {
	case "table", "yaml", "json":
		if hasTmpl {
			return nil, fmt.Errorf("output %q takes no template: use -o %s", format, name)
		}
	case "jsonpath", "jsonpath-as-json":
		if !hasTmpl || tmpl == "" {
			return nil, fmt.Errorf("output %s needs a template: -o '%s={.spec}'", name, name)
		}
	default:
		return nil, fmt.Errorf("unknown output %q: use one of %s", format, strings.Join(Formats, ", "))
	}

	switch name {
	case "table":
		return NewTable(w), nil
	case "yaml":
		return &YAML{w: w}, nil
	case "json":
		return &JSON{w: w}, nil
	}

	jp := jsonpath.New("output")
	if err := jp.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("output %s: parsing template %q: %w", name, tmpl, err)
	}

	return &JSONPath{w: w, jp: jp, asJSON: name == "jsonpath-as-json"}, nil
}
