package talosctl

import (
	"strings"
	"testing"
)

// checkEtcdDowngrade runs etcd downgrade validate|enable|cancel against a bootstrapped member
// (called from TestEtcdCommands, which owns the node).
func checkEtcdDowngrade(t *testing.T, sock string) {
	t.Helper()

	out, stderr, err := runEtcdCommand(t, sock, "etcd", "downgrade", "validate", "3.5")
	if err != nil {
		t.Fatalf("downgrade validate 3.5: %v %s", err, stderr)
	}

	mustContain(t, out, "NODE", "MESSAGE", "local", "downgrade validate success, cluster version 3.6")

	// Two minor versions down is refused by etcd, and the CLI names the node.
	_, stderr, err = runEtcdCommand(t, sock, "etcd", "downgrade", "validate", "3.4")
	if err == nil {
		t.Fatal("downgrade to 3.4 validated")
	}

	mustContain(t, stderr, "error: local: etcd downgrade validate:")

	out, stderr, err = runEtcdCommand(t, sock, "etcd", "downgrade", "enable", "3.5")
	if err != nil {
		t.Fatalf("downgrade enable 3.5: %v %s", err, stderr)
	}

	mustContain(t, out, "downgrade enable success")

	out, stderr, err = runEtcdCommand(t, sock, "etcd", "downgrade", "cancel")
	if err != nil || !strings.Contains(out, "downgrade cancel success") {
		t.Fatalf("downgrade cancel: %v %s %s", err, out, stderr)
	}

}
