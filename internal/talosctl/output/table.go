package output

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"gopkg.in/yaml.v3"
	"k8s.io/client-go/util/jsonpath"
)

// Table writes NODE NAMESPACE TYPE ID VERSION and the definition's print columns, with an
// event column (+ created, - destroyed, blank updated) when watching.
type Table struct {
	tw          *tabwriter.Writer
	withEvents  bool
	header      bool
	displayType string
	columns     []*jsonpath.JSONPath
}

// NewTable returns a table writer on w.
func NewTable(w io.Writer) *Table {
	return &Table{tw: tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)}
}

// WriteHeader writes the header once: every node's resources share it.
func (t *Table) WriteHeader(rd *meta.ResourceDefinition, withEvents bool) error {
	if t.header {
		return nil
	}

	t.header = true
	t.withEvents = withEvents
	t.displayType = rd.TypedSpec().DisplayType

	head := []string{"NODE"}
	if withEvents {
		head = append(head, "*")
	}

	head = append(head, "NAMESPACE", "TYPE", "ID", "VERSION")

	for _, col := range rd.TypedSpec().PrintColumns {
		jp := jsonpath.New(col.Name).AllowMissingKeys(true)
		if err := jp.Parse(col.JSONPath); err != nil {
			return fmt.Errorf("print column %q of %s: %w", col.Name, rd.TypedSpec().Type, err)
		}

		head = append(head, strings.ToUpper(col.Name))
		t.columns = append(t.columns, jp)
	}

	_, err := fmt.Fprintln(t.tw, strings.Join(head, "\t"))

	return err
}

// WriteResource writes one row.
func (t *Table) WriteResource(node string, r resource.Resource, event state.EventType) error {
	md := r.Metadata()
	row := []string{node}

	if t.withEvents {
		switch event { //nolint:exhaustive // the other events carry no resource
		case state.Created:
			row = append(row, "+")
		case state.Destroyed:
			row = append(row, "-")
		case state.Updated:
			row = append(row, " ")
		default:
			return nil
		}
	}

	typ := t.displayType
	if typ == "" {
		typ = md.Type()
	}

	row = append(row, md.Namespace(), typ, md.ID(), md.Version().String())

	if len(t.columns) > 0 {
		spec, err := specValue(r)
		if err != nil {
			return err
		}

		for _, jp := range t.columns {
			var buf bytes.Buffer
			if err := jp.Execute(&buf, spec); err != nil {
				return fmt.Errorf("%s: %w", resource.String(r), err)
			}

			row = append(row, buf.String())
		}
	}

	_, err := fmt.Fprintln(t.tw, strings.Join(row, "\t"))

	return err
}

// Flush writes the aligned table.
func (t *Table) Flush() error { return t.tw.Flush() }

// specValue decodes the resource spec into plain maps and lists, through its YAML form (the
// print columns' paths are written against the YAML field names).
func specValue(r resource.Resource) (any, error) {
	b, err := yaml.Marshal(r.Spec())
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", resource.String(r), err)
	}

	var v any
	if err = yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", resource.String(r), err)
	}

	return v, nil
}
