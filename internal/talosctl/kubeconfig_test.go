package talosctl

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

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

func parseKC(t *testing.T, data []byte) *clientcmdapi.Config {
	t.Helper()

	k, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}

	return k
}

func names[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

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

	last := k.Contexts["admin@talos-2"]
	if last.Cluster != "talos-2" || last.AuthInfo != "admin@talos-2" || last.Namespace != "default" {
		t.Errorf("renamed context refs: %v", last)
	}

	if k.Clusters["talos"].Server != "https://old:6443" || k.Clusters["talos-2"].Server != "https://newer:6443" {
		t.Errorf("servers: %v", k.Clusters)
	}

	mustContain(t, log.String(), `cluster "talos" -> "talos-1"`, `context "admin@talos" -> "admin@talos-2"`)
}

func TestKubeconfigMergeForceReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	testenv.WriteFile(t, path, kc("other", "me", "https://other:6443")+"preferences:\n    colors: true\n", 0o600)

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

	if k.Clusters["talos"].Server != "https://b:6443" || k.CurrentContext != "admin@talos" {
		t.Errorf("force merge: %v current %s", k.Clusters, k.CurrentContext)
	}

	if !k.Preferences.Colors {
		t.Error("the existing preferences were dropped")
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
