package openstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Meta is what the node reads of meta_data.json; its other keys (keys, public_keys,
// devices, project_id...) are left alone.
type Meta struct {
	UUID             string // uuid: the instance's ID
	Hostname         string // hostname, may be a FQDN
	AvailabilityZone string // availability_zone
	InstanceType     string // instance_type (upstream's; Nova itself does not write it)
}

// ParseMetaData reads a meta_data.json. Empty is no metadata; anything but a JSON object, or a
// key read here that is not a string, is an error naming it.
func ParseMetaData(b []byte) (Meta, error) {
	var m Meta

	if len(bytes.TrimSpace(b)) == 0 {
		return m, nil
	}

	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return m, errors.New("not a JSON object of keys ({\"uuid\": ..., \"hostname\": ...})")
		}

		return m, fmt.Errorf("not JSON: %w", err)
	}

	for _, k := range []struct {
		key   string
		field *string
	}{{"uuid", &m.UUID}, {"hostname", &m.Hostname}, {"availability_zone", &m.AvailabilityZone}, {"instance_type", &m.InstanceType}} {
		v, ok := doc[k.key]
		if !ok || string(v) == "null" {
			continue
		}

		if err := json.Unmarshal(v, k.field); err != nil {
			return m, fmt.Errorf("%s: %s is not a string: give it one (\"%s\": \"<value>\")", k.key, v, k.key)
		}
	}

	return m, nil
}
