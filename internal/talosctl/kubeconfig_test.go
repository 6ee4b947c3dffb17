package talosctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/testenv"
)

func kc(cluster, user, server string) string {
	return `apiVersion: v1
kind: Config
clusters:
    - name: ` + cluster + `
      cluster:
        server: ` + server + `
contexts:
    - name: ` + user + `@` + cluster + `
      context:
        cluster: ` + cluster + `
        namespace: default
        user: ` + user + `@` + cluster + `
current-context: ` + user + `@` + cluster + `
users:
    - name: ` + user + `@` + cluster + `
      user:
        token: secret
`
}

func parseKC(t *testing.T, data []byte) kubeconfig {
	t.Helper()

	var k kubeconfig
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}

	return k
}

func names(list []namedEntry) []string {
	var out []string
	for _, e := range list {
		out = append(out, e.Name)
	}

	return out
}

func TestKubeconfigMergeRenamesWithIndexSuffix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	testenv.WriteFile(t, path, kc("talos", "admin", "https://old:6443"), 0o600)

	var log strings.Builder

	if err := mergeKubeconfigFile(path, []byte(kc("talos", "admin", "https://new:6443")), "", false, &log); err != nil {
		t.Fatal(err)
	}

	if err := mergeKubeconfigFile(path, []byte(kc("talos", "admin", "https://newer:6443")), "", false, &log); err != nil {
		t.Fatal(err)
	}

	data, _ := os.ReadFile(path)
	k := parseKC(t, data)

	if got := strings.Join(names(k.Clusters), ","); got != "talos,talos-1,talos-2" {
		t.Errorf("clusters: %s", got)
	}

	if got := strings.Join(names(k.Contexts), ","); got != "admin@talos,admin@talos-1,admin@talos-2" {
		t.Errorf("contexts: %s", got)
	}

	if k.CurrentContext != "admin@talos-2" {
		t.Errorf("current context: %s", k.CurrentContext)
	}

	last := k.Contexts[2].Context
	if last["cluster"] != "talos-2" || last["user"] != "admin@talos-2" || last["namespace"] != "default" {
		t.Errorf("renamed context refs: %v", last)
	}

	if k.Clusters[0].Cluster["server"] != "https://old:6443" || k.Clusters[2].Cluster["server"] != "https://newer:6443" {
		t.Errorf("servers: %v", k.Clusters)
	}

	mustContain(t, log.String(), `cluster "talos" -> "talos-1"`, `context "admin@talos" -> "admin@talos-2"`)
}

func TestKubeconfigMergeForceReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	testenv.WriteFile(t, path, kc("other", "me", "https://other:6443")+"preferences: {}\n", 0o600)

	for _, server := range []string{"https://a:6443", "https://b:6443"} {
		if err := mergeKubeconfigFile(path, []byte(kc("talos", "admin", server)), "", true, &strings.Builder{}); err != nil {
			t.Fatal(err)
		}
	}

	data, _ := os.ReadFile(path)
	k := parseKC(t, data)

	if got := strings.Join(names(k.Clusters), ","); got != "other,talos" {
		t.Errorf("clusters: %s", got)
	}

	if k.Clusters[1].Cluster["server"] != "https://b:6443" || k.CurrentContext != "admin@talos" {
		t.Errorf("force merge: %v current %s", k.Clusters, k.CurrentContext)
	}

	if _, ok := k.Rest["preferences"]; !ok {
		t.Error("unknown keys were dropped")
	}
}

func TestKubeconfigForceContextName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	testenv.WriteFile(t, path, kc("talos", "admin", "https://old:6443"), 0o600)

	if err := mergeKubeconfigFile(path, []byte(kc("talos", "admin", "https://new:6443")), "prod", false, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}

	data, _ := os.ReadFile(path)
	k := parseKC(t, data)

	if k.CurrentContext != "prod" || !strings.Contains(strings.Join(names(k.Contexts), ","), "prod") {
		t.Errorf("contexts %v current %s", names(k.Contexts), k.CurrentContext)
	}
}

func TestKubeconfigPath(t *testing.T) {
	home := isolate(t)

	if p, _ := kubeconfigPath(nil); p != filepath.Join(home, ".kube", "config") {
		t.Errorf("default: %s", p)
	}

	t.Setenv("KUBECONFIG", "/a/one"+string(os.PathListSeparator)+"/b/two")

	if p, _ := kubeconfigPath(nil); p != "/a/one" {
		t.Errorf("KUBECONFIG: %s", p)
	}

	if p, _ := kubeconfigPath([]string{"x"}); p != "x" {
		t.Errorf("argument: %s", p)
	}
}
