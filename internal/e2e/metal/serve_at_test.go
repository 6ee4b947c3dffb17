package metal

import (
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// serveAt serves h on addr:80 in the test's own network namespace, with addr on its loopback:
// a guest on QEMU's open user network that connects to addr reaches it through QEMU, and
// nothing leaves the namespace. The address goes when the test ends.
func serveAt(t *testing.T, addr string, h http.Handler) {
	t.Helper()

	if out, err := exec.Command("ip", "address", "add", addr+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("adding %s to the loopback: %v\n%s", addr, err, out)
	}

	t.Cleanup(func() { exec.Command("ip", "address", "del", addr+"/32", "dev", "lo").Run() })

	l, err := net.Listen("tcp", addr+":80")
	if err != nil {
		t.Fatal(err)
	}

	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}

	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// guestGet is `talosctl get` on the guest, 10.0.2.15 on QEMU's user network, through the
// endpoint ep.
func guestGet(t *testing.T, cli testenv.CLI, ep string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()

		return cli.Must(t, append([]string{"-e", ep, "-n", "10.0.2.15", "get"}, args...)...)
	}
}

// assertPlatformMetadata checks each key of want in the node's platformmetadata (YAML).
func assertPlatformMetadata(t *testing.T, get func(args ...string) string, want map[string]string) {
	t.Helper()

	out := get("platformmetadata", "-o", "yaml")
	for key, value := range want {
		if !regexp.MustCompile(`(?m)^\s+` + key + `: ` + regexp.QuoteMeta(value) + `$`).MatchString(out) {
			t.Errorf("platformmetadata has no %s: %s:\n%s", key, value, out)
		}
	}
}

// assertExternalAddress checks that the platform's external (public) address ip is published
// as upstream does: an address of the link "external" in get addresses, among the node's
// current addresses and not among its routed ones.
func assertExternalAddress(t *testing.T, get func(args ...string) string, ip string) {
	t.Helper()

	prefix := regexp.QuoteMeta(ip + "/32")

	if out := get("addresses"); !regexp.MustCompile(`(?m)external/` + prefix + `\s`).MatchString(out) {
		t.Errorf("get addresses: no external/%s/32:\n%s", ip, out)
	}

	listed := regexp.MustCompile(`(?m)^\s+- ` + prefix + `$`)

	if out := get("nodeaddresses", "current", "-o", "yaml"); !listed.MatchString(out) {
		t.Errorf("the external address %s is not a current node address:\n%s", ip, out)
	}

	if out := get("nodeaddresses", "routed", "-o", "yaml"); listed.MatchString(out) || !strings.Contains(out, "10.0.2.15/24") {
		t.Errorf("the routed node addresses are not the card's alone (%s is external):\n%s", ip, out)
	}
}
