package provision_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"

	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/testenv"
)

func TestNodeAddresses(t *testing.T) {
	addrs, err := provision.NodeAddresses(netip.MustParsePrefix("127.5.0.0/24"), 3)
	if err != nil || addrs[0].String() != "127.5.0.2" || addrs[2].String() != "127.5.0.4" {
		t.Fatalf("%v %v", addrs, err)
	}

	if _, err = provision.NodeAddresses(netip.MustParsePrefix("127.5.0.0/30"), 3); err == nil {
		t.Fatal("a /30 cannot hold 3 nodes")
	}
}

func TestCreateShowDestroy(t *testing.T) {
	root := t.TempDir()
	var progress bytes.Buffer

	req := provision.Request{
		Name: "t1", ControlPlanes: 1, Workers: 1, CIDR: netip.MustParsePrefix("127.5.26.0/24"),
		StateRoot: root, Binary: testenv.MachinedBinary(t), Progress: &progress,
		Patches:       []string{`{"machine": {"certSANs": ["example.test"]}}`},
		CPPatches:     []string{`{"machine": {"env": {"ROLE_PATCH": "controlplane"}}}`},
		WorkerPatches: []string{`{"machine": {"env": {"ROLE_PATCH": "worker"}}}`},
	}

	c, cfgs, err := provision.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { provision.Destroy(root, "t1", &progress) })

	if len(c.Nodes) != 2 || c.Nodes[0].Address != "127.5.26.2" || c.Nodes[1].Type != provision.TypeWorker {
		t.Fatalf("nodes: %+v", c.Nodes)
	}

	if ctx := cfgs.Talosconfig.Contexts[cfgs.Talosconfig.Context]; ctx == nil || ctx.Endpoints[0] != "127.5.26.2" {
		t.Fatalf("talosconfig endpoints: %+v", ctx)
	}

	// The per-node config carries the hostname and the patch.
	cfg, _ := os.ReadFile(c.Nodes[1].Config)
	if !bytes.Contains(cfg, []byte("hostname: t1-worker-1")) || !bytes.Contains(cfg, []byte("example.test")) {
		t.Fatalf("node config lacks hostname or patch:\n%s", cfg)
	}

	// Per-type patches reach only their type.
	cpCfg, _ := os.ReadFile(c.Nodes[0].Config)
	if !bytes.Contains(cpCfg, []byte("ROLE_PATCH: controlplane")) || bytes.Contains(cpCfg, []byte("ROLE_PATCH: worker")) ||
		!bytes.Contains(cfg, []byte("ROLE_PATCH: worker")) || bytes.Contains(cfg, []byte("ROLE_PATCH: controlplane")) {
		t.Fatalf("per-type patches misapplied:\n%s\n---\n%s", cpCfg, cfg)
	}

	// Each node serves its socket.
	for _, n := range c.Nodes {
		sock := filepath.Join(n.State, "system", "run", "machined", "machined.sock")
		testenv.WaitFor(t, "node "+n.Name+" serving its socket", 30*time.Second, func() error {
			if _, err := os.Stat(sock); err != nil {
				return fmt.Errorf("%w; its log:\n%s", err, testenv.TailFile(filepath.Join(c.Dir, n.Name+".log"), 32<<10))
			}

			return nil
		})
	}

	// A second create with the same name is refused.
	if _, _, err = provision.Create(context.Background(), req); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second create: %v", err)
	}

	loaded, err := provision.Load(root, "t1")
	if err != nil || !loaded.Nodes[0].Running() || !loaded.Nodes[1].Running() {
		t.Fatalf("loaded state: %+v %v", loaded, err)
	}

	if err = provision.Destroy(root, "t1", &progress); err != nil {
		t.Fatal(err)
	}

	for _, n := range loaded.Nodes {
		if n.Running() {
			t.Fatalf("node %s still running after destroy", n.Name)
		}
	}

	if _, err = os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatal("cluster folder left behind")
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	for _, req := range []provision.Request{
		{Name: "", ControlPlanes: 1, CIDR: netip.MustParsePrefix("127.5.0.0/24"), Binary: "x"},
		{Name: "a", ControlPlanes: 0, CIDR: netip.MustParsePrefix("127.5.0.0/24"), Binary: "x"},
		{Name: "a", ControlPlanes: 1, CIDR: netip.MustParsePrefix("10.5.0.0/24"), Binary: "x"},
		{Name: "a", ControlPlanes: 1, CIDR: netip.MustParsePrefix("127.5.0.0/24"), Binary: "x", Arch: "riscv64"},
		{Name: "a", ControlPlanes: 1, CIDR: netip.MustParsePrefix("127.5.0.0/24"), Binary: "x", QEMU: provision.QEMURequest{JSONLogs: true}},
	} {
		req.StateRoot = t.TempDir()
		if _, _, err := provision.Create(context.Background(), req); err == nil {
			t.Errorf("request %+v accepted", req)
		}
	}
}

func TestInputDir(t *testing.T) {
	endpoint := netip.MustParseAddr("127.5.21.2")

	gen, err := provision.GenerateConfigs("in", endpoint, "", provision.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()

	for name, data := range map[string][]byte{"controlplane.yaml": gen.ControlPlane, "worker.yaml": gen.Worker} {
		if err = os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	if _, err = provision.GenerateConfigs("in", endpoint, dir, provision.GenerateOptions{}); err == nil || !strings.Contains(err.Error(), "--input-dir") {
		t.Fatalf("a missing talosconfig must name --input-dir: %v", err)
	}

	if err = gen.Talosconfig.Save(filepath.Join(dir, "talosconfig")); err != nil {
		t.Fatal(err)
	}

	got, err := provision.GenerateConfigs("in", endpoint, dir, provision.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The given files are used as they are: same secrets, not new ones.
	if !bytes.Equal(got.ControlPlane, gen.ControlPlane) || !bytes.Equal(got.Worker, gen.Worker) || got.Talosconfig.Context != gen.Talosconfig.Context {
		t.Fatal("--input-dir configs were not used as given")
	}
}

// The create flags' choices are in the generated configs.
func TestGenerateOptions(t *testing.T) {
	endpoint := netip.MustParseAddr("127.5.21.2")

	gen, err := provision.GenerateConfigs("opts", endpoint, "", provision.GenerateOptions{
		KubernetesVersion: "1.34.0",
		TalosVersion:      "v1.6",
		ControlPlanePort:  7443,
		Options: []generate.Option{generate.WithDNSDomain("example.test"), generate.WithLocalAPIServerPort(7443), generate.WithKubePrismPort(0),
			generate.WithInstallImage("registry.test/installer:v9")},
	})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(gen.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	if got := cfg.Cluster().Endpoint().String(); got != "https://127.5.21.2:7443" {
		t.Errorf("endpoint %s", got)
	}

	if cfg.Cluster().LocalAPIServerPort() != 7443 || cfg.Cluster().Network().DNSDomain() != "example.test" || cfg.Machine().Features().KubePrism().Enabled() {
		t.Errorf("port %d, domain %s, KubePrism %v", cfg.Cluster().LocalAPIServerPort(), cfg.Cluster().Network().DNSDomain(), cfg.Machine().Features().KubePrism().Enabled())
	}

	if got := cfg.Machine().Install().Image(); got != "registry.test/installer:v9" {
		t.Errorf("install image %s", got)
	}

	// The v1.6 contract's defaults: no host DNS (generated configs have it from v1.7 on).
	if strings.Contains(string(gen.ControlPlane), "forwardKubeDNSToHost") {
		t.Error("the v1.6 config has the host DNS of later versions")
	}

	if _, err = provision.GenerateConfigs("opts", endpoint, "", provision.GenerateOptions{TalosVersion: "banana"}); err == nil || !strings.Contains(err.Error(), "--talos-version") {
		t.Errorf("a bad --talos-version: %v", err)
	}
}
