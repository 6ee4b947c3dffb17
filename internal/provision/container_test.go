package provision

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/testenv"
)

func TestContainerRequestRefused(t *testing.T) {
	image := filepath.Join(t.TempDir(), "rootfs.sqsh")
	if err := os.WriteFile(image, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}

	good := func() Request {
		return Request{
			Name: "c", ControlPlanes: 1, CIDR: netip.MustParsePrefix(DefaultContainerCIDR), Binary: "/bin/true",
			Provisioner: ProvisionerContainer, Container: ContainerRequest{Image: image, MTU: 1500},
		}
	}

	for _, tc := range []struct {
		name   string
		euid   int
		change func(*Request)
		want   []string
	}{
		{"not root", 1000, func(*Request) {}, []string{"needs root", "--provisioner process"}},
		{"loopback network", 0, func(r *Request) { r.CIDR = netip.MustParsePrefix("127.5.0.0/24") }, []string{"--cidr 127.5.0.0/24", "10.5.0.0/24"}},
		{"IPv6 network", 0, func(r *Request) { r.CIDR = netip.MustParsePrefix("fd00::/64") }, []string{"--cidr", "IPv4"}},
		{"no image", 0, func(r *Request) { r.Container.Image = filepath.Join(filepath.Dir(image), "missing.sqsh") }, []string{"--image", "make rootfs"}},
		{"small MTU", 0, func(r *Request) { r.Container.MTU = 100 }, []string{"--mtu 100"}},
		{"negative memory", 0, func(r *Request) { r.Container.MemoryWorker = -1 }, []string{"--memory"}},
		{"negative cpus", 0, func(r *Request) { r.Container.CPUs = -1 }, []string{"--cpus"}},
		{"unknown provisioner", 0, func(r *Request) { r.Provisioner = "docker" }, []string{`--provisioner "docker"`, "process", "container"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := good()
			tc.change(&req)
			assertRefused(t, req, tc.euid, tc.want...)
		})
	}
}

func TestGatewayAndLinkNames(t *testing.T) {
	if got := Gateway(netip.MustParsePrefix("10.5.0.0/24")); got.String() != "10.5.0.1/24" {
		t.Fatalf("gateway %s", got)
	}

	addrs, err := NodeAddresses(netip.MustParsePrefix("10.5.0.0/24"), 2)
	if err != nil || addrs[0].String() != "10.5.0.2" || addrs[1].String() != "10.5.0.3" {
		t.Fatalf("node addresses %v %v", addrs, err)
	}

	// Link names are at most 15 bytes and differ per cluster folder.
	a, b := "br-"+shortHash("/a", 12), "br-"+shortHash("/b", 12)
	if len(a) > 15 || a == b {
		t.Fatalf("bridge names %q %q", a, b)
	}
}

// assertRefused runs Create with req as the user euid and checks that it fails saying every
// one of want, and makes nothing.
func assertRefused(t *testing.T, req Request, euid int, want ...string) {
	t.Helper()

	orig := geteuid
	geteuid = func() int { return euid }

	t.Cleanup(func() { geteuid = orig })

	req.StateRoot = t.TempDir()

	_, _, err := Create(context.Background(), req)
	if err == nil {
		t.Fatal("create accepted the request")
	}

	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}

	if entries, _ := os.ReadDir(req.StateRoot); len(entries) != 0 {
		t.Errorf("the refused create left %v", entries)
	}
}

// On a cgroup v1 machine `cluster create` says the nodes' cgroups lack v2's figures; on a
// cgroup v2 machine (cgroup.controllers at the root) it says nothing.
func TestNoteCgroups(t *testing.T) {
	root := container.CgroupRoot
	t.Cleanup(func() { container.CgroupRoot = root })

	for _, tc := range []struct {
		name   string
		files  []string
		wantV1 bool
	}{
		{"v1", []string{"memory/cgroup.procs"}, true},
		{"v2", []string{"cgroup.controllers"}, false},
	} {
		container.CgroupRoot = t.TempDir()
		for _, f := range tc.files {
			testenv.WriteFile(t, filepath.Join(container.CgroupRoot, f), "", 0o644)
		}

		var out strings.Builder

		noteCgroups(&out)

		if got := strings.Contains(out.String(), "the nodes get cgroup v1 controllers") && strings.Contains(out.String(), "no memory.min or memory.low protection and no cpu.weight"); got != tc.wantV1 {
			t.Errorf("%s machine: the note is %q", tc.name, out.String())
		}
	}
}
