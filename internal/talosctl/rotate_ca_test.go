package talosctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestIntegrationRotateCA rotates the Talos API CA of a process-mode cluster (a control plane
// and a worker): the Kubernetes part refuses before changing anything, pointing to
// --kubernetes=false; a dry run changes nothing; the rotation leaves a talosconfig that reaches
// both nodes while the old one is refused.
func TestIntegrationRotateCA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}

	home := isolate(t)

	binDir, err := testenv.Binaries()
	if err != nil {
		t.Fatal(err)
	}

	talosconfig := filepath.Join(home, ".talos", "config")
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: home, TalosConfig: talosconfig, Timeout: 4 * time.Minute}

	const prefix = "127.5.25."

	cli.Must(t, "cluster", "create", "--name", "rotca", "--controlplanes", "1", "--workers", "1",
		"--cidr", prefix+"0/24", "--wait-timeout", "3m")

	t.Cleanup(func() { cli.Run(t, "cluster", "destroy", "--name", "rotca") })

	cp, worker := prefix+"2", prefix+"3"
	nodes := []string{"--control-plane-nodes", cp, "--worker-nodes", worker}

	before, err := os.ReadFile(talosconfig)
	if err != nil {
		t.Fatal(err)
	}

	oldConfig := filepath.Join(home, "old-talosconfig")
	testenv.WriteFile(t, oldConfig, string(before), 0o600)

	unchanged := func(what string) {
		t.Helper()

		if now, _ := os.ReadFile(talosconfig); string(now) != string(before) {
			t.Fatalf("%s changed the talosconfig", what)
		}
	}

	// The Kubernetes part first: refused (no Kubernetes CA on the nodes, or its rotation not
	// written yet), and nothing changes.
	_, stderr, code := cli.Run(t, append([]string{"rotate-ca"}, nodes...)...)
	if code == 0 || !strings.Contains(stderr, "--kubernetes=false") {
		t.Fatalf("rotate-ca with Kubernetes: code %d, stderr %s", code, stderr)
	}

	unchanged("the refused Kubernetes rotation")

	acceptedBefore := cli.Must(t, "-n", worker, "get", "machineconfig", "-o", "jsonpath={.spec}")

	out := cli.Must(t, append([]string{"rotate-ca", "--kubernetes=false"}, nodes...)...)
	mustContain(t, out, "dry run", cp, worker)
	unchanged("the dry run")

	if now := cli.Must(t, "-n", worker, "get", "machineconfig", "-o", "jsonpath={.spec}"); now != acceptedBefore {
		t.Fatal("the dry run changed the worker's machine config")
	}

	out = cli.Must(t, append([]string{"rotate-ca", "--kubernetes=false", "--dry-run=false"}, nodes...)...)
	mustContain(t, out, "accepting the new CA", "switching", "dropping the old CA", "rotated")

	after, err := os.ReadFile(talosconfig)
	if err != nil {
		t.Fatal(err)
	}

	if string(after) == string(before) {
		t.Fatal("the talosconfig was not updated")
	}

	out = cli.Must(t, "-n", cp+","+worker, "version")
	if strings.Count(out, "Tag:") != 3 { // the client's, and both nodes'
		t.Errorf("version through the new talosconfig:\n%s", out)
	}

	// The old client certificate and CA no longer work.
	if _, _, code = cli.Run(t, "--talosconfig", oldConfig, "-n", cp, "version"); code == 0 {
		t.Error("the old talosconfig still reaches the node after the rotation")
	}
}
