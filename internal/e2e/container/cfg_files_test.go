package container

// machine.network.extraHostEntries, machine.env and machine.files take effect on the nodes.
// Named to run before cluster_test.go, whose tests reset and destroy the worker.

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestExtraHostEntriesFollowConfig: extraHostEntries applied without a reboot appear in the
// worker's /etc/hosts beside its own names, follow a change and go with the entries; a bad IP
// is refused naming the field, and /etc/hosts stays.
func TestExtraHostEntriesFollowConfig(t *testing.T) {
	hosts := func() string { return must(t, "-n", w, "read", "/etc/hosts") }

	waitHosts := func(what string, check func(string) error) {
		t.Helper()
		testenv.WaitFor(t, what, time.Minute, func() error { return check(hosts()) })
	}

	t.Cleanup(func() {
		talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p", `[{"op":"remove","path":"/machine/network/extraHostEntries"}]`)
	})

	must(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		`{"machine":{"network":{"extraHostEntries":[{"ip":"192.0.2.10","aliases":["e2e-extra","e2e-extra.example"]}]}}}`)
	waitHosts("the entry in /etc/hosts", func(h string) error {
		if !strings.Contains(h, "\n192.0.2.10\te2e-extra e2e-extra.example\n") || !strings.Contains(h, "127.0.0.1\tlocalhost\n") ||
			!strings.Contains(h, w+"\t") {
			return fmt.Errorf("/etc/hosts:\n%s", h)
		}

		return nil
	})

	_, errOut, code := talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		`[{"op":"replace","path":"/machine/network/extraHostEntries","value":[{"ip":"not-an-ip","aliases":["x"]}]}]`)
	if code == 0 || !strings.Contains(errOut, `machine.network.extraHostEntries[0].ip "not-an-ip": not an IP address`) {
		t.Fatalf("a bad IP: exit %d, %s", code, errOut)
	}

	must(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		`[{"op":"replace","path":"/machine/network/extraHostEntries","value":[{"ip":"fd00::10","aliases":["e2e-other"]}]}]`)
	waitHosts("the changed entry", func(h string) error {
		if !strings.Contains(h, "\nfd00::10\te2e-other\n") || strings.Contains(h, "e2e-extra") {
			return fmt.Errorf("/etc/hosts:\n%s", h)
		}

		return nil
	})

	t.Logf("worker /etc/hosts after the change:\n%s", hosts())
	must(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p", `[{"op":"remove","path":"/machine/network/extraHostEntries"}]`)
	waitHosts("the entries gone", func(h string) error {
		if strings.Contains(h, "e2e-other") {
			return fmt.Errorf("/etc/hosts:\n%s", h)
		}

		return nil
	})
}

// envPatch is machine.env for both nodes; workerPatch adds machine.files on the worker: a /var
// file created with its mode (0o640) then appended to, and the CRI part that turns containerd's
// metrics on.
const (
	envPatch    = `{"machine":{"env":{"E2E_TALOS_ENV":"honoured","GRPC_GO_LOG_SEVERITY_LEVEL":"error"}}}`
	workerPatch = `{"machine":{"env":{"E2E_TALOS_ENV":"honoured","GRPC_GO_LOG_SEVERITY_LEVEL":"error"},"files":[` +
		`{"op":"create","path":"/var/e2e-files/app.conf","content":"first\n","permissions":416},` +
		`{"op":"append","path":"/var/e2e-files/app.conf","content":"second\n","permissions":416},` +
		`{"op":"create","path":"/etc/cri/conf.d/20-customization.part","content":"[metrics]\n  address = \"0.0.0.0:11234\"\n","permissions":420}]}}`
)

// TestMachineEnvAndFilesAfterReboot: machine.env and machine.files need a reboot (refused with
// --mode no-reboot); staged and rebooted, containerd and kubelet on the worker and etcd on the
// control plane have the variables in their environment, the /var file is there with its
// mode and both ops' content, and the CRI part turned containerd's metrics endpoint on. A file
// outside /var is refused naming machine.files[0].path. The settings stay (the worker is reset
// later in the suite; the variables are harmless).
func TestMachineEnvAndFilesAfterReboot(t *testing.T) {
	cs, _ := kube(t)

	_, errOut, code := talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "staged", "-p",
		`{"machine":{"files":[{"op":"create","path":"/etc/motd","content":"x","permissions":420}]}}`)
	if code == 0 || !strings.Contains(errOut, `machine.files[0].path "/etc/motd": the root is read-only, files go under /var only`) {
		t.Fatalf("a file outside /var: exit %d, %s", code, errOut)
	}

	_, errOut, code = talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p", envPatch)
	if code == 0 || !strings.Contains(errOut, "machine.env") || !strings.Contains(errOut, "cannot be applied without a reboot") {
		t.Fatalf("env without a reboot: exit %d, %s", code, errOut)
	}

	must(t, "-n", cp, "patch", "machineconfig", "--mode", "staged", "-p", envPatch)
	must(t, "-n", w, "patch", "machineconfig", "--mode", "staged", "-p", workerPatch)

	ids := map[string]string{cp: bootID(t, cp), w: bootID(t, w)}
	before := time.Now()

	must(t, "-n", w, "reboot", "--wait=false")
	must(t, "-n", cp, "reboot", "--wait=false")

	for node, id := range ids {
		testenv.WaitFor(t, node+" back", 5*time.Minute, func() error {
			if after, _, code := talosctl(t, "-n", node, "read", "/proc/sys/kernel/random/boot_id"); code != 0 || strings.TrimSpace(after) == id {
				return fmt.Errorf("boot id %q (exit %d)", strings.TrimSpace(after), code)
			}

			return nil
		})
	}

	waitNodeReady(t, cs, clusterName+"-controlplane-1", cp, before, time.Now(), 5*time.Minute)
	waitNodeReady(t, cs, clusterName+"-worker-1", w, before, time.Now(), 5*time.Minute)

	// Each service's process environment, read through the API.
	for _, p := range []struct{ node, what, match string }{
		{w, "containerd", "/usr/bin/containerd --config"},
		{w, "kubelet", "/usr/local/bin/kubelet"},
		{cp, "etcd", "--name="},
		{cp, "containerd", "/usr/bin/containerd --config"},
	} {
		testenv.WaitFor(t, p.what+"'s environment on "+p.node, 2*time.Minute, func() error {
			pid, err := processPID(t, p.node, p.match)
			if err != nil {
				return err
			}

			env, errOut, code := talosctl(t, "-n", p.node, "read", "/proc/"+pid+"/environ")
			if code != 0 {
				return fmt.Errorf("reading %s's environ: %s", p.what, errOut)
			}

			vars := strings.Split(env, "\x00")
			for _, want := range []string{"E2E_TALOS_ENV=honoured", "GRPC_GO_LOG_SEVERITY_LEVEL=error"} {
				if !contains(vars, want) {
					return fmt.Errorf("%s (pid %s) has no %s in %q", p.what, pid, want, vars)
				}
			}

			t.Logf("%s on %s (pid %s): %d variables, E2E_TALOS_ENV and GRPC_GO_LOG_SEVERITY_LEVEL among them", p.what, p.node, pid, len(vars))

			return nil
		})
	}

	if got := must(t, "-n", w, "read", "/var/e2e-files/app.conf"); got != "first\nsecond\n" {
		t.Errorf("/var/e2e-files/app.conf is %q, want both ops' content", got)
	}

	if ls := must(t, "-n", w, "ls", "-l", "/var/e2e-files"); !strings.Contains(ls, "-rw-r-----") || !strings.Contains(ls, "app.conf") {
		t.Errorf("/var/e2e-files/app.conf is not 0640:\n%s", ls)
	} else {
		t.Logf("worker ls -l /var/e2e-files:\n%s", ls)
	}

	// containerd serves metrics only where the CRI part asked for them.
	testenv.WaitFor(t, "containerd's metrics on the worker", time.Minute, func() error {
		resp, err := http.Get("http://" + w + ":11234/v1/metrics") //nolint:noctx // a bounded probe in a wait loop
		if err != nil {
			return err
		}
		defer resp.Body.Close()

		body, _ := io.ReadAll(resp.Body) // the status and what came say enough
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "# TYPE") {
			return fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
		}

		t.Logf("worker containerd metrics: status %d, %d bytes", resp.StatusCode, len(body))

		return nil
	})

	client := &http.Client{Timeout: 3 * time.Second}
	if resp, err := client.Get("http://" + cp + ":11234/v1/metrics"); err == nil { //nolint:noctx // a bounded probe
		resp.Body.Close()
		t.Errorf("the control plane, without the CRI part, serves containerd metrics (status %d)", resp.StatusCode)
	}
}

// processPID is the PID of node's first process whose command line contains match.
func processPID(t *testing.T, node, match string) (string, error) {
	out, errOut, code := talosctl(t, "-n", node, "processes")
	if code != 0 {
		return "", fmt.Errorf("processes: %s", errOut)
	}

	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(line, match) {
			return f[1], nil
		}
	}

	return "", fmt.Errorf("no process %q on %s:\n%s", match, node, out)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}

	return false
}
