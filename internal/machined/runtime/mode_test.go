package runtime_test

import (
	"testing"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/runtime"
)

// TestModeCapabilities: each kind of node, as its provisioner launches it, has exactly its
// capabilities; a kind's own capabilities do not follow from the image alone.
func TestModeCapabilities(t *testing.T) {
	type caps struct {
		sharesHost, ownKernel, ownNetwork, containerNode, ownsMachine, ownsCgroups bool
		containerd, kubernetes, requiresInstall, inContainer                       bool
		platform                                                                   string
		node                                                                       configsupport.Node
	}

	image := func(m runtime.Mode) runtime.Mode { m.HasContainerd, m.HasKubernetesImages = true, true; return m }

	for _, tc := range []struct {
		name string
		mode runtime.Mode
		want caps
	}{
		// A process node runs no containerd even where the host has one.
		{"process", image(runtime.Mode{Kind: runtime.Process}), caps{sharesHost: true, inContainer: true,
			platform: "container", node: configsupport.Process}},
		{"container", image(runtime.Mode{Kind: runtime.Container, PID1: true}), caps{ownNetwork: true, containerNode: true,
			ownsCgroups: true, containerd: true, kubernetes: true, inContainer: true, platform: "container", node: configsupport.Container}},
		{"container, development image", runtime.Mode{Kind: runtime.Container, PID1: true}, caps{ownNetwork: true, containerNode: true,
			ownsCgroups: true, inContainer: true, platform: "container", node: configsupport.Container}},
		{"container, KUBERNETES=0 image", runtime.Mode{Kind: runtime.Container, PID1: true, HasContainerd: true}, caps{ownNetwork: true,
			containerNode: true, ownsCgroups: true, containerd: true, inContainer: true, platform: "container", node: configsupport.Container}},
		{"metal", image(runtime.Mode{Kind: runtime.Metal, PID1: true}), caps{ownKernel: true, ownNetwork: true, ownsMachine: true,
			ownsCgroups: true, containerd: true, kubernetes: true, requiresInstall: true, platform: "metal", node: configsupport.Metal}},
		// Not PID 1 (a test's runtime): nothing that needs the node's init.
		{"metal, not PID 1", image(runtime.Mode{Kind: runtime.Metal}), caps{ownKernel: true, ownNetwork: true, requiresInstall: true,
			platform: "metal", node: configsupport.Metal}},
	} {
		m := tc.mode
		got := caps{m.SharesHost(), m.OwnKernel(), m.OwnNetwork(), m.ContainerNode(), m.OwnsMachine(), m.OwnsCgroups(),
			m.RunsContainerd(), m.RunsKubernetes(), m.RequiresInstall(), m.InContainer(), m.String(), m.Node()}

		if got != tc.want {
			t.Errorf("%s node: capabilities\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestDetectModeKind: the kind follows machined's --platform and --state as its provisioners
// pass them; a test process is never PID 1.
func TestDetectModeKind(t *testing.T) {
	for _, tc := range []struct {
		platform, root string
		want           runtime.Kind
	}{
		{runtime.PlatformContainer, t.TempDir(), runtime.Process},
		{runtime.PlatformContainer, "/", runtime.Container},
		{runtime.PlatformMetal, "/", runtime.Metal},
	} {
		m := runtime.DetectMode(tc.platform, tc.root)
		if m.Kind != tc.want || m.PID1 {
			t.Errorf("DetectMode(%q, %q) = kind %d, PID1 %v; want kind %d, not PID 1", tc.platform, tc.root, m.Kind, m.PID1, tc.want)
		}
	}
}
