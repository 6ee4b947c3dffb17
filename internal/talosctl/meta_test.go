package talosctl

import (
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/meta"
)

// checkMetaAndRestart runs meta write|delete and restart against a running node (called from
// the machined-socket integration test, which owns the node).
func checkMetaAndRestart(t *testing.T, sock []string, stateDir string) {
	t.Helper()

	runUntil(t, ok, append(sock, "meta", "write", "0x0c", "hello")...)

	store, err := meta.Open(stateDir + "/META")
	if err != nil {
		t.Fatal(err)
	}

	if v, err := store.Get("talos.0x0c"); err != nil || v != "aGVsbG8=" {
		t.Fatalf("META talos.0x0c = %q (%v), want base64 of hello", v, err)
	}

	runUntil(t, ok, append(sock, "meta", "delete", "12")...)

	// A second delete names the node and the reason.
	code, _, stderr := run(t, append(sock, "meta", "delete", "0x0c")...)
	if code == 0 {
		t.Error("deleting a key twice succeeded")
	}

	mustContain(t, stderr, "error: local: meta delete 0x0c: the META key is not set")

	code, _, stderr = run(t, append(sock, "meta", "write", "0x100", "x")...)
	if code == 0 {
		t.Error("key 0x100 accepted")
	}

	mustContain(t, stderr, `META key "0x100": want a number from 0 to 255`)

	// A node process on a shared host has no containerd: Restart says so, and the CLI names the
	// node.
	code, _, stderr = run(t, append(sock, "restart", "apid")...)
	if code == 0 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("restart: code %d, %q", code, stderr)
	}

	mustContain(t, stderr, "error: local: restart apid:", "containerd is not running on this node")
}
