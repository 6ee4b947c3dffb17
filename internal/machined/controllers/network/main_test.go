package network_test

import (
	"os"
	"testing"

	"github.com/talos-go/talos/internal/container/netnstest"
)

// The netlink tests make links and addresses: as root they run in a network namespace of their
// own, so CI runs them without touching the machine's network.
func TestMain(m *testing.M) {
	if code, done := netnstest.Isolate(); done {
		os.Exit(code)
	}

	os.Exit(m.Run())
}
