package talosctl

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// evalColumn evaluates the small JSONPath subset used by resource print columns:
// {.a.b}, {.a[*].b}, {.a[0]}, {.a[?(@.k=="v")].b} and {@}. Missing keys give "";
// lists and maps are shown as JSON, several matches are joined by spaces.
func evalColumn(tmpl string, data any) (string, error) {
	expr := strings.TrimSpace(tmpl)
	if !strings.HasPrefix(expr, "{") || !strings.HasSuffix(expr, "}") {
		return "", fmt.Errorf("print column %q is not a {jsonpath} expression", tmpl)
	}

	expr = strings.TrimSuffix(strings.TrimPrefix(expr, "{"), "}")
	expr = strings.TrimPrefix(expr, "@")

	values := []any{data}

	for expr != "" {
		var tok string

		switch expr[0] {
		case '.':
			end := strings.IndexAny(expr[1:], ".[")
			if end < 0 {
				tok, expr = expr[1:], ""
			} else {
				tok, expr = expr[1:end+1], expr[end+1:]
			}

			values = field(values, tok)
		case '[':
			end := strings.IndexByte(expr, ']')
			if end < 0 {
				return "", fmt.Errorf("print column %q: missing ]", tmpl)
			}

			tok, expr = expr[1:end], expr[end+1:]

			if err := checkIndex(tok); err != nil {
				return "", fmt.Errorf("print column %q: %w", tmpl, err)
			}

			var err error
			if values, err = index(values, tok); err != nil {
				return "", fmt.Errorf("print column %q: %w", tmpl, err)
			}
		default:
			return "", fmt.Errorf("print column %q: unexpected %q", tmpl, expr)
		}
	}

	out := make([]string, 0, len(values))

	for _, v := range values {
		out = append(out, formatValue(v))
	}

	return strings.Join(out, " "), nil
}

func field(values []any, name string) []any {
	var out []any

	for _, v := range values {
		if m, ok := v.(map[string]any); ok {
			if fv, ok := m[name]; ok {
				out = append(out, fv)
			}
		}
	}

	return out
}

func index(values []any, tok string) ([]any, error) {
	var out []any

	for _, v := range values {
		switch {
		case tok == "*":
			switch c := v.(type) {
			case []any:
				out = append(out, c...)
			case map[string]any:
				for _, e := range c {
					out = append(out, e)
				}
			}
		case strings.HasPrefix(tok, "?(@.") && strings.HasSuffix(tok, ")"):
			cond := strings.TrimSuffix(strings.TrimPrefix(tok, "?(@."), ")")

			key, want, ok := strings.Cut(cond, "==")
			if !ok {
				return nil, fmt.Errorf("filter %q: only == is supported", tok)
			}

			want = strings.Trim(strings.TrimSpace(want), `"'`)

			list, _ := v.([]any)
			for _, e := range list {
				if m, ok := e.(map[string]any); ok && formatValue(m[strings.TrimSpace(key)]) == want {
					out = append(out, e)
				}
			}
		default:
			i, err := strconv.Atoi(tok)
			if err != nil {
				return nil, fmt.Errorf("unsupported index %q", tok)
			}

			if list, ok := v.([]any); ok && i >= 0 && i < len(list) {
				out = append(out, list[i])
			}
		}
	}

	return out, nil
}

func formatValue(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case []any, map[string]any:
		b, err := json.Marshal(t)
		if err != nil {
			return fmt.Sprint(t)
		}

		return string(b)
	default:
		return fmt.Sprint(t)
	}
}

func checkIndex(tok string) error {
	if tok == "*" {
		return nil
	}

	if strings.HasPrefix(tok, "?(@.") {
		if !strings.HasSuffix(tok, ")") || !strings.Contains(tok, "==") {
			return fmt.Errorf("filter %q: only [?(@.key==\"value\")] is supported", tok)
		}

		return nil
	}

	if _, err := strconv.Atoi(tok); err != nil {
		return fmt.Errorf("unsupported index %q", tok)
	}

	return nil
}
