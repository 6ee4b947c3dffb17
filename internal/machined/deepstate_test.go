package machined_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// TestDeepStateFolder: a state folder so deep that the machine API socket's path passes the
// kernel's limit for socket addresses (as under a long home folder or cluster name) still
// serves, on the socket and through apid, which is sandboxed.
func TestDeepStateFolder(t *testing.T) {
	testenv.MachinedBinary(t) // built before the deadline starts
	ctx := testenv.Context(t, 3*time.Minute)

	const addr = "127.5.1.9"

	state := filepath.Join(t.TempDir(), strings.Repeat("a-deep-folder/", 6))
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}

	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, testenv.Config(t, machinetype.TypeControlPlane, addr), 0o600); err != nil {
		t.Fatal(err)
	}

	n := testenv.StartNodeArgs(t, state, "--platform", "container", "--state", state, "--address", addr, "--config", cfgPath)

	if len(n.Socket()) <= 108 {
		t.Fatalf("the test socket path is only %d bytes: make the folder deeper", len(n.Socket()))
	}

	c := n.Client(t)
	n.WaitConfigured(t, c)

	// A client config from the node itself, then Version through its apid (apidClient waits
	// for an answer and fails the test without one).
	apidClient(ctx, t, c, addr)
}
