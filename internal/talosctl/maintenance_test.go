package talosctl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestGetInsecure: a node without a config answers `get --insecure` for hardware, disks and
// network through its maintenance API, and refuses the rest.
func TestGetInsecure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts machined")
	}

	addr := testenv.Loopback(79) + "1"
	testenv.StartNode(t, addr, nil)

	talosctl := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer

		code := Execute(append([]string{"--talosconfig", t.TempDir() + "/none"}, args...), &stdout, &stderr)

		return stdout.String(), stderr.String(), code
	}

	// The maintenance API comes up once the boot reaches it.
	testenv.WaitFor(t, "the maintenance API", 30*time.Second, func() bool {
		_, _, code := talosctl("-n", addr, "version", "--insecure")

		return code == 0
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "systeminformation"}, "SystemInformation"},
		{[]string{"get", "cpus"}, "CPU_0"},
		{[]string{"get", "disks", "-o", "yaml"}, "Disks.block.talos.dev"},
		{[]string{"get", "nodeaddresses"}, addr + "/32"},
	} {
		out, errOut, code := talosctl(append(append([]string{"-n", addr}, tc.args...), "--insecure")...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("talosctl %v --insecure: exit %d, want %q in\n%s%s", tc.args, code, tc.want, out, errOut)
		}
	}

	if _, errOut, code := talosctl("-n", addr, "get", "services", "--insecure"); code == 0 || !strings.Contains(errOut, "maintenance") {
		t.Errorf("services through maintenance: exit %d\n%s", code, errOut)
	}
}
