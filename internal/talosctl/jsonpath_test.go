package talosctl

import "testing"

func TestEvalColumn(t *testing.T) {
	data := map[string]any{
		"hostname":  "n1",
		"addresses": []any{"10.0.0.1/24", "fd00::1/64"},
		"endpoints": []any{map[string]any{"host": "a", "port": 1}, map[string]any{"host": "b", "port": 2}},
		"conditions": []any{
			map[string]any{"type": "MemoryPressure", "status": "False"},
			map[string]any{"type": "Ready", "status": "True"},
		},
		"cpuTotal": map[string]any{"user": 1.5},
		"ready":    true,
	}

	for _, tc := range []struct{ expr, want string }{
		{"{.hostname}", "n1"},
		{"{.addresses}", `["10.0.0.1/24","fd00::1/64"]`},
		{"{.addresses[1]}", "fd00::1/64"},
		{"{.endpoints[*].host}", "a b"},
		{"{.endpoints[*].port}", "1 2"},
		{`{.conditions[?(@.type=="Ready")].status}`, "True"},
		{"{.cpuTotal.user}", "1.5"},
		{"{.ready}", "true"},
		{"{.missing}", ""},
		{"{.missing.deeper}", ""},
	} {
		got, err := evalColumn(tc.expr, data)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)

			continue
		}

		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.expr, got, tc.want)
		}
	}

	if got, _ := evalColumn("{@}", "scalar"); got != "scalar" {
		t.Errorf("{@}: %q", got)
	}

	for _, bad := range []string{".hostname", "{.a[}", "{.a[x]}"} {
		if _, err := evalColumn(bad, data); err == nil {
			t.Errorf("%s: expected an error", bad)
		}
	}
}
