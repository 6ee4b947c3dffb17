package talosctl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInjectServiceAccount(t *testing.T) {
	in := filepath.Join("testdata", "inject-serviceaccount-in.yaml")

	code, out, stderr := run(t, "inject", "serviceaccount", "-f", in, "--roles", "os:reader,os:operator")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}

	golden(t, "inject-serviceaccount-out.yaml", out)

	// Three workloads get a ServiceAccount each; the ConfigMap does not. container2 already
	// mounted talos-secrets: it keeps one mount, not two.
	if n := strings.Count(out, "kind: ServiceAccount"); n != 3 {
		t.Errorf("want 3 ServiceAccounts, got %d", n)
	}

	if n := strings.Count(out, "mountPath: /var/run/secrets/talos.dev"); n != 5 {
		t.Errorf("want 5 mounts (deployment 1, pod 3, cronjob 1), got %d", n)
	}

	// stdin through the sa alias, default role.
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}

	cmdOut, cmdErr := runStdin(t, string(data), "inject", "sa", "-f", "-")
	mustContain(t, cmdOut, "name: talos-api-access-talos-secrets", "namespace: tools", "- os:reader")

	if strings.Contains(cmdOut, "os:operator") || cmdErr != "" {
		t.Errorf("default roles: want os:reader only, got stderr %q", cmdErr)
	}

	for _, bad := range [][]string{
		{"inject", "serviceaccount", "-f", in, "--roles", "os:superuser"},
		{"inject", "serviceaccount"},
	} {
		code, out, stderr := run(t, bad...)
		if code == 0 || out != "" || !strings.Contains(stderr, "--") {
			t.Errorf("%v: want a failure naming the flag, got code %d, out %q, stderr %q", bad, code, out, stderr)
		}
	}
}

// runStdin runs talosctl with stdin and returns stdout and stderr.
func runStdin(t *testing.T, stdin string, args ...string) (string, string) {
	t.Helper()

	var out, stderr bytes.Buffer

	root := NewRootCommand()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&stderr)

	if err := root.Execute(); err != nil {
		t.Fatalf("%v: %v: %s", args, err, stderr.String())
	}

	return out.String(), stderr.String()
}
