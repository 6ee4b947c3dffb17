package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"gopkg.in/yaml.v3"
)

// YAML writes each resource as a YAML document (node, event when watching, metadata, spec),
// documents separated by ---.
type YAML struct {
	w          io.Writer
	withEvents bool
	count      int
}

// WriteHeader records whether events are shown.
func (y *YAML) WriteHeader(_ *meta.ResourceDefinition, withEvents bool) error {
	y.withEvents = withEvents

	return nil
}

// WriteResource writes one document.
func (y *YAML) WriteResource(node string, r resource.Resource, event state.EventType) error {
	b, err := resourceYAML(r)
	if err != nil {
		return err
	}

	if y.count > 0 {
		fmt.Fprintln(y.w, "---")
	}

	y.count++

	fmt.Fprintf(y.w, "node: %s\n", node)

	if y.withEvents {
		fmt.Fprintf(y.w, "event: %s\n", strings.ToLower(event.String()))
	}

	_, err = y.w.Write(b)

	return err
}

// Flush does nothing: documents are written as they come.
func (y *YAML) Flush() error { return nil }

// JSON writes each resource as an indented JSON object with the fields of the YAML form.
type JSON struct {
	w          io.Writer
	withEvents bool
}

// WriteHeader records whether events are shown.
func (j *JSON) WriteHeader(_ *meta.ResourceDefinition, withEvents bool) error {
	j.withEvents = withEvents

	return nil
}

// WriteResource writes one object.
func (j *JSON) WriteResource(node string, r resource.Resource, event state.EventType) error {
	doc, err := document(node, r, event, j.withEvents)
	if err != nil {
		return err
	}

	enc := json.NewEncoder(j.w)
	enc.SetIndent("", "    ")

	if err = enc.Encode(doc); err != nil {
		return fmt.Errorf("encoding %s as JSON: %w", resource.String(r), err)
	}

	return nil
}

// Flush does nothing: objects are written as they come.
func (j *JSON) Flush() error { return nil }

// document is the resource as plain maps: its YAML form plus node (and event when watching),
// the data JSON and JSONPath outputs work on.
func document(node string, r resource.Resource, event state.EventType, withEvents bool) (map[string]any, error) {
	b, err := resourceYAML(r)
	if err != nil {
		return nil, err
	}

	doc := map[string]any{}
	if err = yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", resource.String(r), err)
	}

	doc["node"] = node

	if withEvents {
		doc["event"] = strings.ToLower(event.String())
	}

	return doc, nil
}

func resourceYAML(r resource.Resource) ([]byte, error) {
	v, err := resource.MarshalYAML(r)
	if err == nil {
		var b []byte

		if b, err = yaml.Marshal(v); err == nil {
			return b, nil
		}
	}

	return nil, fmt.Errorf("encoding %s: %w", resource.String(r), err)
}
