package metal

import (
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"
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
