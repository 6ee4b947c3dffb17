package container_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/talos-go/talos/internal/configpatch"
	node "github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/provision"
	"github.com/talos-go/talos/internal/provision/container"
	_ "github.com/talos-go/talos/internal/provision/providers" // the other kinds' base patches
	"github.com/talos-go/talos/internal/provision/provisiontest"
	"github.com/talos-go/talos/internal/testenv"
)

func TestContainerRequestRefused(t *testing.T) {
	image := filepath.Join(t.TempDir(), "rootfs.sqsh")
	if err := os.WriteFile(image, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}

	good := func() provision.Request {
		return provision.Request{
			Name: "c", ControlPlanes: 1, CIDR: netip.MustParsePrefix(provision.DefaultContainerCIDR), Binary: "/bin/true",
			Provisioner: provision.ProvisionerContainer, Container: provision.ContainerRequest{Image: image, MTU: 1500},
		}
	}

	for _, tc := range []struct {
		name   string
		euid   int
		change func(*provision.Request)
		want   []string
	}{
		{"not root", 1000, func(*provision.Request) {}, []string{"needs root", "--provisioner process"}},
		{"loopback network", 0, func(r *provision.Request) { r.CIDR = netip.MustParsePrefix("127.5.0.0/24") }, []string{"--cidr 127.5.0.0/24", "10.5.0.0/24"}},
		{"IPv6 network", 0, func(r *provision.Request) { r.CIDR = netip.MustParsePrefix("fd00::/64") }, []string{"--cidr", "IPv4"}},
		{"no image", 0, func(r *provision.Request) { r.Container.Image = filepath.Join(filepath.Dir(image), "missing.sqsh") }, []string{"--image", "make rootfs"}},
		{"small MTU", 0, func(r *provision.Request) { r.Container.MTU = 100 }, []string{"--mtu 100"}},
		{"negative memory", 0, func(r *provision.Request) { r.Container.MemoryWorker = -1 }, []string{"--memory"}},
		{"negative cpus", 0, func(r *provision.Request) { r.Container.CPUs = -1 }, []string{"--cpus"}},
		{"unknown provisioner", 0, func(r *provision.Request) { r.Provisioner = "docker" }, []string{`--provisioner "docker"`, "process", "container"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := good()
			tc.change(&req)
			provisiontest.AssertRefused(t, container.Geteuid, req, tc.euid, tc.want...)
		})
	}
}

// On a cgroup v1 machine `cluster create` says the nodes' cgroups lack v2's figures; on a
// cgroup v2 machine (cgroup.controllers at the root) it says nothing.
func TestNoteCgroups(t *testing.T) {
	root := node.CgroupRoot
	t.Cleanup(func() { node.CgroupRoot = root })

	for _, tc := range []struct {
		name   string
		files  []string
		wantV1 bool
	}{
		{"v1", []string{"memory/cgroup.procs"}, true},
		{"v2", []string{"cgroup.controllers"}, false},
	} {
		node.CgroupRoot = t.TempDir()
		for _, f := range tc.files {
			testenv.WriteFile(t, filepath.Join(node.CgroupRoot, f), "", 0o644)
		}

		var out strings.Builder

		container.NoteCgroups(&out)

		if got := strings.Contains(out.String(), "the nodes get cgroup v1 controllers") && strings.Contains(out.String(), "no memory.min or memory.low protection and no cpu.weight"); got != tc.wantV1 {
			t.Errorf("%s machine: the note is %q", tc.name, out.String())
		}
	}
}

// A container node's kubelet neither evicts nor collects images over the host disk's free
// share; a user's patch still wins, key by key; other provisioners keep kubelet's defaults.
func TestContainerKubeletIgnoresTheHostDisk(t *testing.T) {
	_, cp, _ := testenv.Configs(t, "10.5.0.2")

	eviction := func(cfg []byte) map[string]any {
		t.Helper()

		c, err := configloader.NewFromBytes(cfg)
		if err != nil {
			t.Fatal(err)
		}

		ev, _ := c.Machine().Kubelet().ExtraConfig()["evictionHard"].(map[string]any)

		return ev
	}

	out := applyPatches(t, cp, basePatches(t, provision.ProvisionerContainer))

	if ev := eviction(out); ev["imagefs.available"] != "0%" || ev["nodefs.available"] != "0%" {
		t.Errorf("container node's evictionHard: %v, want 0%% for nodefs and imagefs", ev)
	}

	user := `{"machine": {"kubelet": {"extraConfig": {"evictionHard": {"nodefs.available": "5%"}}}}}`
	out = applyPatches(t, cp, append(basePatches(t, provision.ProvisionerContainer), user))

	if ev := eviction(out); ev["nodefs.available"] != "5%" || ev["imagefs.available"] != "0%" {
		t.Errorf("with the user's nodefs.available: %v, want theirs and ours for imagefs", ev)
	}

	for _, p := range []string{provision.ProvisionerQEMU, provision.ProvisionerProcess} {
		out = applyPatches(t, cp, basePatches(t, p))

		if ev := eviction(out); ev != nil {
			t.Errorf("%s node's evictionHard: %v, want kubelet's defaults", p, ev)
		}
	}
}

// basePatches are the named kind's patches under the user's.
func basePatches(t *testing.T, name string) []string {
	t.Helper()

	p, err := provision.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}

	return p.BasePatches()
}

// applyPatches applies patches to cfg in order, as create does.
func applyPatches(t *testing.T, cfg []byte, patches []string) []byte {
	t.Helper()

	loaded, err := configpatcher.LoadPatches(patches)
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatch.Apply(configpatcher.WithBytes(cfg), loaded)
	if err != nil {
		t.Fatal(err)
	}

	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return b
}
