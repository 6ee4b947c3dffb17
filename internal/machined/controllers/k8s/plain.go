package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// plain turns m into plain JSON values (maps, []any, strings, int64, float64, bools), which
// the resources' protobuf encoding (structpb) takes; a []string, say, it refuses.
func plain(m map[string]any) (map[string]any, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}

	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()

	var out map[string]any
	if err = dec.Decode(&out); err != nil {
		return nil, err
	}

	return numbers(out).(map[string]any), nil //nolint:forcetypeassert // a map decodes to a map
}

func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = numbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = numbers(x)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}

		f, _ := v.Float64() // a JSON number is a float

		return f
	}

	return v
}

// mustPlain is plain for maps built by this package from plain values.
func mustPlain(m map[string]any) map[string]any {
	out, err := plain(m)
	if err != nil {
		panic(fmt.Sprintf("encoding a generated document: %v", err))
	}

	return out
}
