package nocloud

import (
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"
)

// Metadata is what the node reads of a meta-data document (cloud-init's YAML mapping); other
// keys are left alone, as cloud-init's own datasources add many.
type Metadata struct {
	InstanceID    string // instance-id
	LocalHostname string // local-hostname, else hostname
	InstanceType  string // instance-type
	ProviderID    string // provider-id
	Region        string // region
	Zone          string // zone, else availability-zone
}

// metadataKeys are the keys read, in the order they are checked; the pointer is the field.
func (m *Metadata) keys() []struct {
	key   string
	field *string
} {
	return []struct {
		key   string
		field *string
	}{
		{"instance-id", &m.InstanceID}, {"hostname", &m.LocalHostname}, {"local-hostname", &m.LocalHostname},
		{"instance-type", &m.InstanceType}, {"provider-id", &m.ProviderID}, {"region", &m.Region},
		{"availability-zone", &m.Zone}, {"zone", &m.Zone},
	}
}

// ParseMetadata reads a meta-data document. Empty is no metadata; anything but a mapping, or a
// key read here that holds a list or a mapping, is an error naming it.
func ParseMetadata(b []byte) (Metadata, error) {
	var m Metadata

	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return m, fmt.Errorf("not YAML: %w", err)
	}

	if len(doc.Content) == 0 {
		return m, nil
	}

	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return m, fmt.Errorf("line %d: not a mapping of keys (instance-id: ..., local-hostname: ...)", root.Line)
	}

	values := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		values[root.Content[i].Value] = root.Content[i+1]
	}

	// Later keys of the list win: local-hostname over hostname, zone over availability-zone.
	for _, k := range m.keys() {
		v, ok := values[k.key]
		if !ok {
			continue
		}

		if v.Kind != yaml.ScalarNode || !slices.Contains([]string{"!!str", "!!int", "!!float", "!!bool", "!!null"}, v.ShortTag()) {
			return m, fmt.Errorf("line %d: %s is not a string: give it one value (%s: <value>)", v.Line, k.key, k.key)
		}

		if v.ShortTag() == "!!null" {
			*k.field = ""

			continue
		}

		*k.field = v.Value
	}

	return m, nil
}
