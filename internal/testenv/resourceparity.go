package testenv

import (
	"bytes"
	"context"
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"gopkg.in/yaml.v3"
)

// machineryPkg prefixes the packages whose named integer types are machinery's enums.
const machineryPkg = "github.com/siderolabs/talos/pkg/machinery/"

// ResourceParity checks a live node's resources against machinery v1.11.0's definitions, as
// upstream's tools read them: through the State API (the machinery client) and through
// `talosctl get -o yaml`.
type ResourceParity struct {
	// State is the machinery client's COSI state, pointed at the node.
	State state.State
	// YAML runs our `talosctl get <type> -o yaml` against the node.
	YAML func(typ resource.Type) (string, error)
	// Empty are the registered types this node is expected to leave empty, with why: one that
	// holds resources fails (take it off the list).
	Empty map[resource.Type]string
	// MayBeEmpty are the registered types this node may leave empty, with why: checked when
	// they hold resources (a node that other tests configure and unconfigure).
	MayBeEmpty map[resource.Type]string
}

// ParityCounts are what a ResourceParity run saw.
type ParityCounts struct {
	Types, Checked, Excepted, Resources, Enums, Required int
}

// Check reads every resource of every definition and checks each: the spec decodes as the
// machinery type and survives a protobuf round trip; every enum field holds a value machinery
// defines; the fields upstream always sets (RequiredFields) are set; the YAML talosctl prints
// parses back into the machinery type (no unknown field) with the same spec. A type with no
// resource fails unless it is in Empty or MayBeEmpty, or is not machinery's (OwnTypes).
func (p ResourceParity) Check(ctx context.Context, t testing.TB, defs []meta.ResourceWithRD) ParityCounts {
	t.Helper()

	var n ParityCounts

	for _, def := range defs {
		rd := def.ResourceDefinition()
		n.Types++

		if why, ok := OwnTypes[rd.Type]; ok {
			t.Logf("%s: not machinery's (%s)", rd.Type, why)
			n.Excepted++

			continue
		}

		if why, ok := NotOnTheWire[rd.Type]; ok {
			t.Logf("%s: not decodable from the wire (%s)", rd.Type, why)
			n.Excepted++

			continue
		}

		list, err := p.State.List(ctx, resource.NewMetadata(rd.DefaultNamespace, rd.Type, "", resource.VersionUndefined))
		if err != nil {
			t.Errorf("list %s: %v", rd.Type, err)

			continue
		}

		why, emptyOK := p.Empty[rd.Type]
		_, mayBeEmpty := p.MayBeEmpty[rd.Type]

		switch {
		case len(list.Items) == 0 && (emptyOK || mayBeEmpty):
			n.Excepted++

			continue
		case len(list.Items) == 0:
			t.Errorf("%s: registered, but the node holds none: fill it, or list it as empty on this kind of node with the reason", rd.Type)

			continue
		case emptyOK:
			t.Errorf("%s has %d resources now: take it off the empty list (%s)", rd.Type, len(list.Items), why)
		}

		var out string

		if out, err = p.YAML(rd.Type); err != nil {
			t.Errorf("talosctl get %s -o yaml: %v", rd.Type, err)
		}

		docs, err := yamlDocs(out)
		if err != nil {
			t.Errorf("talosctl get %s -o yaml: %v\n%s", rd.Type, err, out)
		}

		n.Checked++

		for _, r := range list.Items {
			n.Resources++

			if want := reflect.TypeOf(def); reflect.TypeOf(r) != want {
				t.Errorf("%s: decoded as %T, not machinery's %s", r.Metadata(), r, want)

				continue
			}

			if err = protoRoundTrip(r); err != nil {
				t.Errorf("%s: %v", r.Metadata(), err)
			}

			enums, errs := checkEnums(reflect.ValueOf(r.Spec()), "spec")
			n.Enums += enums

			for _, e := range errs {
				t.Errorf("%s: %v", r.Metadata(), e)
			}

			for _, field := range RequiredFields[rd.Type] {
				n.Required++

				if v := fieldByPath(reflect.ValueOf(r.Spec()), field); !v.IsValid() || v.IsZero() {
					t.Errorf("%s: spec.%s is empty; upstream always sets it", r.Metadata(), field)
				}
			}

			if doc, ok := docs[r.Metadata().ID()]; !ok {
				t.Errorf("%s: missing from talosctl get -o yaml", r.Metadata())
			} else if err = yamlMatches(r, doc); err != nil {
				t.Errorf("%s: talosctl get -o yaml: %v", r.Metadata(), err)
			}
		}
	}

	return n
}

// yamlDoc is one document of `talosctl get -o yaml`.
type yamlDoc struct {
	Node     string    `yaml:"node"`
	Metadata yaml.Node `yaml:"metadata"`
	Spec     yaml.Node `yaml:"spec"`
}

// yamlDocs parses the documents by resource ID.
func yamlDocs(out string) (map[string]yamlDoc, error) {
	docs := map[string]yamlDoc{}

	dec := yaml.NewDecoder(strings.NewReader(out))

	for {
		var doc yamlDoc

		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}

		if err != nil {
			return docs, err
		}

		var md struct {
			ID      string `yaml:"id"`
			Version string `yaml:"version"`
		}

		if err = doc.Metadata.Decode(&md); err != nil {
			return docs, fmt.Errorf("metadata: %w", err)
		}

		if md.ID == "" {
			return docs, errors.New("a document without metadata.id")
		}

		if doc.Node == "" {
			return docs, fmt.Errorf("%s: no node: in the document", md.ID)
		}

		docs[md.ID] = doc
	}
}

// yamlMatches checks a document against the State API's resource: its spec decodes into a
// fresh machinery spec, refusing fields the type does not have (for a spec with its own
// one-way YAML form, such as a static pod's manifest, the form is compared instead), and equals
// the State API's when both reads saw the same version.
func yamlMatches(r resource.Resource, doc yamlDoc) error {
	raw, err := yaml.Marshal(&doc.Spec)
	if err != nil {
		return err
	}

	isConfig := r.Metadata().Type() == config.MachineConfigType
	if isConfig {
		// The spec is the config's documents themselves.
		if doc.Spec.Kind == yaml.ScalarNode {
			raw = []byte(doc.Spec.Value)
		}

		if _, err = configloader.NewFromBytes(raw); err != nil {
			return fmt.Errorf("the machine config does not load: %w", err)
		}
	}

	_, ownForm := r.Spec().(yaml.Marshaler)
	_, ownParse := r.Spec().(yaml.Unmarshaler)

	fresh := r.DeepCopy()
	spec := reflect.ValueOf(fresh.Spec())

	decodable := !isConfig && (!ownForm || ownParse) && spec.Kind() == reflect.Pointer && spec.Elem().CanSet()

	if decodable {
		spec.Elem().SetZero()

		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)

		if err = dec.Decode(fresh.Spec()); err != nil {
			return fmt.Errorf("spec does not parse into %T: %w", fresh.Spec(), err)
		}
	}

	var md struct {
		Version string `yaml:"version"`
	}

	if err = doc.Metadata.Decode(&md); err != nil {
		return err
	}

	if md.Version != r.Metadata().Version().String() {
		return nil // changed between the two reads
	}

	want, err := yaml.Marshal(r.Spec())
	if err != nil {
		return err
	}

	var printed, api any

	if err = yaml.Unmarshal(raw, &printed); err != nil {
		return err
	}

	if err = yaml.Unmarshal(want, &api); err != nil {
		return err
	}

	if !reflect.DeepEqual(printed, api) {
		return fmt.Errorf("printed spec differs from the State API's:\n%s\nState API:\n%s", raw, want)
	}

	if got, _ := yaml.Marshal(fresh.Spec()); decodable && !bytes.Equal(got, want) {
		return fmt.Errorf("spec parsed back differs:\n%s\nState API:\n%s", got, want)
	}

	return nil
}

// protoRoundTrip encodes the resource as the State API does and decodes it back: the same
// machinery type with the same spec.
func protoRoundTrip(r resource.Resource) error {
	p, err := protobuf.FromResource(r, protobuf.WithoutYAML())
	if err != nil {
		return fmt.Errorf("to protobuf: %w", err)
	}

	m, err := p.Marshal()
	if err != nil {
		return fmt.Errorf("to protobuf: %w", err)
	}

	b, err := protobuf.ProtoMarshal(m)
	if err != nil {
		return fmt.Errorf("to protobuf: %w", err)
	}

	var back v1alpha1.Resource
	if err = protobuf.ProtoUnmarshal(b, &back); err != nil {
		return fmt.Errorf("from protobuf: %w", err)
	}

	p2, err := protobuf.Unmarshal(&back)
	if err != nil {
		return fmt.Errorf("from protobuf: %w", err)
	}

	r2, err := protobuf.UnmarshalResource(p2)
	if err != nil {
		return fmt.Errorf("from protobuf: %w", err)
	}

	if reflect.TypeOf(r2) != reflect.TypeOf(r) {
		return fmt.Errorf("protobuf decodes as %T, not %T", r2, r)
	}

	a, err := yaml.Marshal(r.Spec())
	if err != nil {
		return err
	}

	b2, err := yaml.Marshal(r2.Spec())
	if err != nil {
		return err
	}

	if !bytes.Equal(a, b2) {
		return fmt.Errorf("the spec changes through protobuf:\n%s\nback:\n%s", a, b2)
	}

	return nil
}

var stringerFallback = regexp.MustCompile(`^[A-Za-z0-9_]+\(-?[0-9]+\)$`)

var (
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	stringer        = reflect.TypeFor[fmt.Stringer]()
)

// checkEnums walks a spec and checks every machinery enum in it: enumer's IsA<Type> says yes,
// or the value survives its text form (flag sets, whose unknown bits are dropped), or its
// String is not stringer's "Type(n)" for an unknown value. It returns how many it checked.
func checkEnums(v reflect.Value, path string) (int, []error) {
	switch v.Kind() { //nolint:exhaustive // the others hold no enums
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 0, nil
		}

		return checkEnums(v.Elem(), path)
	case reflect.Struct:
		if v.IsZero() {
			return 0, nil // an optional part left unset (a VLAN's settings on a link that is none)
		}

		n, errs := 0, []error(nil)

		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}

			c, e := checkEnums(v.Field(i), path+"."+v.Type().Field(i).Name)
			n, errs = n+c, append(errs, e...)
		}

		return n, errs
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 0, nil
		}

		n, errs := 0, []error(nil)

		for i := range v.Len() {
			c, e := checkEnums(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			n, errs = n+c, append(errs, e...)
		}

		return n, errs
	case reflect.Map:
		n, errs := 0, []error(nil)

		for it := v.MapRange(); it.Next(); {
			c, e := checkEnums(it.Value(), fmt.Sprintf("%s[%v]", path, it.Key()))
			n, errs = n+c, append(errs, e...)
		}

		return n, errs
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if !strings.HasPrefix(v.Type().PkgPath(), machineryPkg) {
			return 0, nil
		}

		if err := enumValid(v); err != nil {
			return 1, []error{fmt.Errorf("%s: %w", path, err)}
		}

		return 1, nil
	default:
		return 0, nil
	}
}

func enumValid(v reflect.Value) error {
	typ := v.Type()

	if m := v.MethodByName("IsA" + typ.Name()); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 {
		if !m.Call(nil)[0].Bool() {
			return fmt.Errorf("%d is not a value of machinery's %s", v.Interface(), typ)
		}

		return nil
	}

	if _, raw := rawKernelFlags[typ]; raw {
		return nil
	}

	if typ.Implements(textMarshaler) && reflect.PointerTo(typ).Implements(textUnmarshaler) {
		text, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return fmt.Errorf("%d of %s has no text form: %w", v.Interface(), typ, err)
		}

		back := reflect.New(typ)
		if err = back.Interface().(encoding.TextUnmarshaler).UnmarshalText(text); err != nil {
			return fmt.Errorf("%d of %s does not parse back from its text form %q: %w", v.Interface(), typ, text, err)
		}

		if back.Elem().Interface() != v.Interface() {
			return fmt.Errorf("%d of %s does not survive its text form %q: a bit or value machinery does not define", v.Interface(), typ, text)
		}

		return nil
	}

	if typ.Implements(stringer) {
		if s := v.Interface().(fmt.Stringer).String(); stringerFallback.MatchString(s) {
			return fmt.Errorf("%s is not a value of machinery's %s", s, typ)
		}
	}

	return nil
}

// fieldByPath follows "A.B" through structs and pointers.
func fieldByPath(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return reflect.Value{}
			}

			v = v.Elem()
		}

		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}

		v = v.FieldByName(name)
		if !v.IsValid() {
			return v
		}
	}

	return v
}
