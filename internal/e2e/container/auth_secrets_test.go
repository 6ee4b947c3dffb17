package container

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/sensitive"
	"github.com/talos-go/talos/internal/testenv"
)

// It runs before cluster_test.go's tests (files in name order): they reset the worker, then
// destroy the cluster.

// TestNoSecretReachesReaderOrOperator: as os:reader and as os:operator, every resource of every
// registered type on both nodes, every service's and Kubernetes container's log, the events,
// dmesg, the process list and a support bundle hold none of the cluster's secrets; reads of
// sensitive types (the kubelet bootstrap token's Manifest among them) are refused with
// PermissionDenied naming os:admin.
func TestNoSecretReachesReaderOrOperator(t *testing.T) {
	start := time.Now()
	nodes := cp + "," + w
	admin := cli()

	// Every registered type, and which of them need os:admin.
	types := resourceTypes(t, admin.Must(t, "-n", cp, "get", "rd", "-o", "yaml"))
	if len(types) < 40 {
		t.Fatalf("only %d resource types registered", len(types))
	}

	secrets := clusterSecrets(t, admin, types)

	roles := map[string]testenv.CLI{}

	for _, r := range []string{"os:reader", "os:operator"} {
		path := filepath.Join(t.TempDir(), "talosconfig")
		admin.Must(t, "-n", cp, "config", "new", path, "--roles", r)

		c := admin
		c.TalosConfig = path
		c.Timeout = time.Minute

		if info := c.Must(t, "config", "info"); !strings.Contains(info, r) || strings.Contains(info, "os:admin") {
			t.Fatalf("the %s talosconfig has other roles:\n%s", r, info)
		}

		roles[r] = c
	}

	scanned := 0
	scan := func(where string, data string) {
		scanned++

		for _, name := range testenv.FoundSecrets([]byte(data), secrets) {
			t.Errorf("%s: holds %s", where, name)
		}
	}

	for r, c := range roles {
		run := func(args ...string) (string, string, int) {
			return c.Run(t, append([]string{"-e", cp}, args...)...)
		}

		// A watch the node allowed would stream until stopped.
		watch := c
		watch.Timeout = 15 * time.Second

		// The leak this test was written for: the bootstrap token's Manifest, by Get, List
		// and Watch.
		for _, args := range [][]string{
			{"-n", cp, "get", "manifests", "-o", "yaml"},
			{"-n", cp, "get", "manifests", "00-kubelet-bootstrapping-token", "-o", "yaml"},
			{"-n", cp, "get", "manifests", "--watch", "-o", "yaml"},
		} {
			out, errOut, code := watch.Run(t, append([]string{"-e", cp}, args...)...)
			scan(r+" "+strings.Join(args, " "), out+errOut)

			if code == 0 || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "Manifests.kubernetes.talos.dev") || !strings.Contains(errOut, "requires role os:admin") {
				t.Errorf("%s %v: want PermissionDenied naming the type and os:admin, got exit %d:\n%s", r, args, code, errOut)
			}
		}

		for _, typ := range types {
			out, errOut, code := run("-n", nodes, "get", typ.Type, "--namespace", typ.DefaultNamespace, "-o", "yaml")
			scan(r+" get "+typ.Type, out+errOut)

			switch secret := sensitive.Resource(typ.DefaultNamespace, typ.Type); {
			case secret && (code == 0 || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "requires role os:admin")):
				t.Errorf("%s get %s: want PermissionDenied, got exit %d:\n%.500s", r, typ.Type, code, errOut+out)
			case !secret && code != 0:
				t.Errorf("%s get %s: a type without secrets is refused (exit %d):\n%s", r, typ.Type, code, errOut)
			}
		}

		for _, node := range []string{cp, w} {
			services := column(c.Must(t, "-e", cp, "-n", node, "services"), 1)
			if len(services) < 4 { // a worker runs apid, containerd, image-cache and kubelet
				t.Errorf("%s %s: only services %v", r, node, services)
			}

			for _, svc := range services {
				out, errOut, code := run("-n", node, "logs", svc)
				scan(r+" "+node+" logs "+svc, out+errOut)

				if code != 0 {
					t.Errorf("%s %s logs %s: exit %d:\n%s", r, node, svc, code, errOut)
				}
			}

			for _, id := range containerIDs(c.Must(t, "-e", cp, "-n", node, "containers", "-k")) {
				out, errOut, _ := run("-n", node, "logs", "-k", id)
				scan(r+" "+node+" logs -k "+id, out+errOut)
			}
		}

		for _, args := range [][]string{{"dmesg"}, {"processes"}, {"containers", "-k"}} {
			out, errOut, code := run(append([]string{"-n", nodes}, args...)...)
			scan(r+" "+strings.Join(args, " "), out+errOut)

			if code != 0 {
				t.Errorf("%s %v: exit %d:\n%s", r, args, code, errOut)
			}
		}

		// events streams until stopped: its history, then a few seconds of new ones.
		events := c
		events.Timeout = 5 * time.Second
		out, errOut, _ := events.Run(t, "-e", cp, "-n", nodes, "events", "--tail", "-1")
		scan(r+" events", out+errOut)

		if !strings.Contains(out, "ServiceStateEvent") {
			t.Errorf("%s events: no history:\n%.2000s%s", r, out, errOut)
		}

		bundle := filepath.Join(t.TempDir(), "support.zip")
		_, errOut, code := run("-n", nodes, "support", "-O", bundle)

		files := unzip(t, bundle)
		if code != 0 || len(files) < 10 {
			t.Errorf("%s support: exit %d, %d files:\n%s", r, code, len(files), errOut)
		}

		for name, data := range files {
			scan(r+" support "+name, data)
		}
	}

	if scanned < 4*len(types) {
		t.Errorf("only %d outputs scanned", scanned)
	}

	t.Logf("%d resource types, %d outputs scanned as os:reader and os:operator for %d secret values, in %s",
		len(types), scanned, len(secrets), time.Since(start).Round(time.Second))
}

// rdSpec is what the test needs of a resource definition.
type rdSpec struct {
	Type             string `yaml:"type"`
	DefaultNamespace string `yaml:"defaultNamespace"`
}

func resourceTypes(t *testing.T, out string) []rdSpec {
	t.Helper()

	var types []rdSpec

	dec := yaml.NewDecoder(strings.NewReader(out))

	for {
		var doc struct {
			Spec rdSpec `yaml:"spec"`
		}

		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return types
		} else if err != nil {
			t.Fatalf("get rd: %v\n%s", err, out)
		}

		types = append(types, doc.Spec)
	}
}

// clusterSecrets are the secret values of the generated configs, of every sensitive resource
// on both nodes read as os:admin (the KubeSpan key when there is one), and of the nodes' key
// and kubeconfig files (keys issued at boot: apid's, etcd's, the kubelet's). It waits for
// Kubernetes to have rendered its manifests and the worker's kubelet to have its certificate,
// checks that every kind of secret the test promises is there, and that the bootstrap token's
// secret really is in the Manifest a reader used to see.
func clusterSecrets(t *testing.T, admin testenv.CLI, types []rdSpec) map[string]string {
	t.Helper()

	out := map[string]string{}

	for _, dir := range []string{filepath.Join(stateRoot, clusterName), filepath.Join(home, ".talos", "clusters", clusterName)} {
		configs, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, c := range configs {
			data, err := os.ReadFile(c)
			if err != nil {
				t.Fatal(err)
			}

			testenv.AddSecretValues(out, filepath.Base(c), data)
		}
	}

	var token string

	for name, v := range out {
		if strings.HasSuffix(name, ".cluster.token (secret part)") {
			token = v
		}
	}

	if token == "" {
		t.Fatal("no bootstrap token in the generated configs")
	}

	// The old rule let os:reader read this.
	testenv.WaitFor(t, "the bootstrap token in the manifests", 3*time.Minute, func() bool {
		m, _, _ := admin.Run(t, "-n", cp, "get", "manifests", "-o", "yaml")
		if !strings.Contains(m, token) {
			time.Sleep(time.Second)
		}

		return strings.Contains(m, token)
	})

	roots := map[string]string{
		cp: "/proc/" + nodeInitPID(t, clusterName+"-controlplane-1") + "/root",
		w:  "/proc/" + nodeInitPID(t, clusterName+"-worker-1") + "/root",
	}

	testenv.WaitFor(t, "the worker's kubelet client certificate", 5*time.Minute, func() bool {
		// A link to the dated file, by its path in the node: Lstat, not Stat, from the host.
		_, err := os.Lstat(roots[w] + "/var/lib/kubelet/pki/kubelet-client-current.pem")
		if err != nil {
			time.Sleep(time.Second)
		}

		return err == nil
	})

	for _, typ := range types {
		if !sensitive.Resource(typ.DefaultNamespace, typ.Type) {
			continue
		}

		for _, node := range []string{cp, w} {
			data := admin.Must(t, "-n", node, "get", typ.Type, "--namespace", typ.DefaultNamespace, "-o", "yaml")
			testenv.AddSecretValues(out, node+" "+typ.Type, []byte(data))
		}
	}

	for node, root := range roots {
		for _, dir := range []string{"/system", "/var/lib/kubelet", "/etc/kubernetes"} {
			filepath.WalkDir(root+dir, func(path string, d fs.DirEntry, err error) error { // what is unreadable is skipped
				if err != nil || !d.Type().IsRegular() {
					return nil //nolint:nilerr // gone meanwhile, or not there on this node
				}

				if info, err := d.Info(); err != nil || info.Size() > 1<<20 {
					return nil //nolint:nilerr // images and binaries hold no secrets of ours
				}

				if data, err := os.ReadFile(path); err == nil {
					testenv.AddSecretValues(out, node+":"+strings.TrimPrefix(path, root), data)
				}

				return nil
			})
		}
	}

	for _, want := range []string{
		".cluster.token (secret part)", ".machine.token", ".cluster.secret", "EncryptionSecret", ".cluster.ca.key",
		".machine.ca.key", ".cluster.etcd.ca.key", ".cluster.serviceAccount.key", ".cluster.aggregatorCA.key",
		cp + " ApiCertificates.secrets.talos.dev", w + " ApiCertificates.secrets.talos.dev",
		cp + " KubernetesDynamicCerts.secrets.talos.dev", cp + " OSRootSecrets.secrets.talos.dev",
		cp + ":/system/secrets/etcd/peer.key", cp + ":/system/secrets/etcd/server.key", w + ":/system/secrets/apid/",
		w + ":/var/lib/kubelet/pki/", w + ":/etc/kubernetes/bootstrap-kubeconfig",
	} {
		found := false

		for name := range out {
			found = found || strings.Contains(name, want)
		}

		if !found {
			t.Fatalf("no secret %q among the %d collected: the collection is broken\n%s", want, len(out), strings.Join(slices.Sorted(maps.Keys(out)), "\n"))
		}
	}

	return out
}

// containerIDs are the IDs of `containers -k`'s rows: a pod's containers are shown under its
// sandbox as "└─ <ID>", as upstream's talosctl shows them.
func containerIDs(table string) []string {
	var out []string

	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[2] == "└─" {
			f = slices.Delete(f, 2, 3)
		}

		if len(f) > 2 {
			out = append(out, f[2])
		}
	}

	return out
}

// column is the given column of a table's rows, the header left out.
func column(table string, i int) []string {
	var out []string

	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		if f := strings.Fields(line); len(f) > i {
			out = append(out, f[i])
		}
	}

	return out
}

func unzip(t *testing.T, path string) map[string]string {
	t.Helper()

	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Errorf("support bundle: %v", err)

		return nil
	}

	defer zr.Close()

	files := map[string]string{}

	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}

		var buf bytes.Buffer
		_, err = io.Copy(&buf, rc)
		rc.Close()

		if err != nil {
			t.Fatal(err)
		}

		files[f.Name] = buf.String()
	}

	return files
}
