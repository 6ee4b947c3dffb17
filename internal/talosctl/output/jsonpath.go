package output

import (
	"fmt"
	"io"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"k8s.io/client-go/util/jsonpath"
)

// JSONPath applies a template to each resource's document (the JSON output's object) with
// kubectl's semantics: jsonpath prints scalars as text and lists and maps as compact JSON,
// one line per resource; jsonpath-as-json prints each resource's results as a JSON array.
type JSONPath struct {
	w          io.Writer
	jp         *jsonpath.JSONPath
	asJSON     bool
	withEvents bool
}

// WriteHeader records whether events are shown.
func (j *JSONPath) WriteHeader(_ *meta.ResourceDefinition, withEvents bool) error {
	j.withEvents = withEvents

	return nil
}

// WriteResource prints the template's results for one resource.
func (j *JSONPath) WriteResource(node string, r resource.Resource, event state.EventType) error {
	doc, err := document(node, r, event, j.withEvents)
	if err != nil {
		return err
	}

	j.jp.EnableJSONOutput(j.asJSON)

	if err = j.jp.Execute(j.w, doc); err != nil {
		return fmt.Errorf("%s: %w", resource.String(r), err)
	}

	if j.asJSON {
		return nil // the JSON array already ends its line
	}

	_, err = fmt.Fprintln(j.w)

	return err
}

// Flush does nothing: results are written as they come.
func (j *JSONPath) Flush() error { return nil }
