package talosctl

import (
	"strings"
	"testing"
)

// Bad create flags are refused before anything is made, naming the flag and the fix.
func TestClusterCreateRefusesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--provisioner", "container", "--kubernetes-version", "1.33.2"}, []string{"--kubernetes-version 1.33.2", "carries Kubernetes 1.34.0", "use 1.34.0"}},
		{[]string{"--control-plane-port", "70000"}, []string{"--control-plane-port 70000", "1-65535"}},
	} {
		home := t.TempDir()
		args := append([]string{"--talosconfig", home + "/config", "cluster", "create", "--state", home, "--name", "refused"}, tc.args...)

		code, out, errOut := run(t, args...)
		if code == 0 {
			t.Fatalf("%v accepted: %s", tc.args, out)
		}

		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: %q not in %q", tc.args, w, errOut)
			}
		}
	}
}
