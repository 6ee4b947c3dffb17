package talosctl

import "testing"

func TestMachineConfigTarget(t *testing.T) {
	for _, tc := range []struct {
		typ, ns string
		ok      bool
	}{
		{"mc", "", true},
		{"machineconfig", "config", true},
		{"MachineConfigs.config.talos.dev", "", true},
		{"machineconfig", "runtime", false},
		{"services", "", false},
	} {
		if err := machineConfigTarget(tc.typ, tc.ns, "edited"); (err == nil) != tc.ok {
			t.Errorf("%s in %q: %v", tc.typ, tc.ns, err)
		}
	}
}
