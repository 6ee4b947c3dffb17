package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// secretValues are the secret strings of the cluster's generated configs (testenv's
// AddSecretValues: tokens, encryption secrets, every private key).
func secretValues(t *testing.T) map[string]string {
	t.Helper()

	out := map[string]string{}

	configs, _ := filepath.Glob(filepath.Join(home, ".talos", "clusters", clusterName, "*.yaml"))
	for _, c := range configs {
		data, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}

		testenv.AddSecretValues(out, filepath.Base(c), data)
	}

	if len(out) < 5 {
		t.Fatalf("found only %d secrets in the generated configs (%v): the walk is broken", len(out), configs)
	}

	return out
}

// TestNoSecretsInLogsOrEvents: no token, encryption secret or private key of the cluster, and
// no PEM private key at all, appears in any service's log (as talosctl logs gives it, and in the
// log files on disk) or in the events.
func TestNoSecretsInLogsOrEvents(t *testing.T) {
	secrets := secretValues(t)
	scanned := 0

	scan := func(where string, data []byte) {
		scanned++

		for _, name := range testenv.FoundSecrets(data, secrets) {
			t.Errorf("%s holds %s", where, name)
		}
	}

	// Every service each node runs: a log that cannot be read is a log not scanned.
	for _, node := range []string{cp1, cp2, cp3, w1} {
		svcs := []string{"machined", "apid"}
		if node != w1 {
			svcs = append(svcs, "trustd", "etcd")
		}

		for _, svc := range svcs {
			out, errOut, code := talosctl(t, "-n", node, "logs", svc)
			if code != 0 || strings.TrimSpace(out) == "" { // each logs at least its start
				t.Errorf("%s logs %s: exit %d, %d bytes: %s", node, svc, code, len(out), errOut)
			}

			scan(node+" logs "+svc, []byte(out))
		}
	}

	// The event stream does not end by itself: it is cut after a few seconds, by when every
	// node's history has arrived.
	events := cli()
	events.Timeout = 3 * time.Second
	out, _, _ := events.Run(t, "-n", strings.Join([]string{cp1, cp2, cp3, w1}, ","), "events", "--tail", "-1")

	if rows := rowsFor(out, cp1, cp2, cp3, w1); len(rows) != 4 {
		t.Errorf("events of all four nodes, got those of %d:\n%s", len(rows), out)
	}

	scan("events", []byte(out))

	root := filepath.Join(home, ".talos", "clusters", clusterName)

	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") && !strings.Contains(path, string(filepath.Separator)+"log"+string(filepath.Separator)) {
			return err
		}

		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}

		scan(strings.TrimPrefix(path, root), data)

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if scanned < 15 { // 14 service logs, the events, and the log files
		t.Fatalf("scanned only %d logs", scanned)
	}

	t.Logf("%d logs and the event history scanned for %d secret values", scanned, len(secrets))
}

// TestSecretsOnDiskArePrivate: every file under the nodes' state that holds a private key, a
// token or the machine config is 0600 (no group or other access), and no folder on the way is
// writable by others.
func TestSecretsOnDiskArePrivate(t *testing.T) {
	secrets := secretValues(t)
	root := filepath.Join(home, ".talos", "clusters", clusterName)
	checked := 0

	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) || os.IsPermission(err) {
				return nil // a socket or a file that went away meanwhile
			}

			return err
		}

		info, err := d.Info()
		if err != nil {
			return nil //nolint:nilerr // gone meanwhile
		}

		if d.IsDir() {
			if info.Mode().Perm()&0o002 != 0 {
				t.Errorf("%s is writable by others (%v)", path, info.Mode().Perm())
			}

			return nil
		}

		if !info.Mode().IsRegular() || info.Size() > 8<<20 {
			return nil
		}

		data, err := os.ReadFile(path)
		if err != nil {
			return nil //nolint:nilerr // gone meanwhile
		}

		secret := bytes.Contains(data, []byte("PRIVATE KEY-----"))
		for _, v := range secrets {
			secret = secret || bytes.Contains(data, []byte(v))
		}

		if !secret {
			return nil
		}

		checked++

		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s holds secrets with mode %v, want 0600", strings.TrimPrefix(path, root), info.Mode().Perm())
		}

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if checked < 8 {
		t.Fatalf("found only %d files with secrets under %s: the walk is broken", checked, root)
	}

	t.Logf("%d files holding secrets checked", checked)
}
