package services

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system/logging"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

// TestKubeletExtraMountIDMappings: machine.kubelet.extraMounts[].uidMappings and gidMappings
// reach the kubelet spec, the kubelet container's mounts and its OCI spec, where the runtime
// makes the ID-mapped bind mount.
func TestKubeletExtraMountIDMappings(t *testing.T) {
	env := ctest.Start(t,
		k8sctrl.NewKubeletConfigController(),
		k8sctrl.NewNodenameController(),
		k8sctrl.NewNodeIPConfigController(),
		k8sctrl.NewNodeIPController(),
		k8sctrl.NewKubeletSpecController(),
	)

	hostname := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hostname.TypedSpec().Hostname = "w1"

	addrs := network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID)
	addrs.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.5.0.3/24")}

	uids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	gids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 200000, Size: 1000}}

	env.Create(hostname, addrs, ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineKubelet.KubeletExtraMounts = []v1alpha1.ExtraMount{{
			Source: "/var/mnt/shared", Destination: "/var/mnt/shared", Type: "bind", Options: []string{"bind", "rw"},
			UIDMappings: []v1alpha1.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
			GIDMappings: []v1alpha1.LinuxIDMapping{{ContainerID: 0, HostID: 200000, Size: 1000}},
		}}
	}))

	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletSpec, a *assert.Assertions) {
		if a.Len(r.TypedSpec().ExtraMounts, 1) {
			a.Equal(uids, r.TypedSpec().ExtraMounts[0].UIDMappings)
			a.Equal(gids, r.TypedSpec().ExtraMounts[0].GIDMappings)
		}
	})

	root := t.TempDir()

	logs, err := logging.NewManager(filepath.Join(root, "logs"))
	require.NoError(t, err)

	r := &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}, Paths: runtime.Paths{Root: root}, State: env.State, Logs: logs}

	proc, err := Kubelet(r).Runner()
	require.NoError(t, err)

	ctr, ok := proc.(*runner.Containerd)
	require.True(t, ok, "kubelet runs as a container: %T", proc)

	var spec specs.Spec
	require.NoError(t, oci.WithMounts(ctr.Mounts)(context.Background(), nil, nil, &spec))

	i := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == "/var/mnt/shared" })
	require.GreaterOrEqual(t, i, 0, "the extra mount is in kubelet's OCI spec: %v", spec.Mounts)
	assert.Equal(t, "/var/mnt/shared", spec.Mounts[i].Source)
	assert.Equal(t, uids, spec.Mounts[i].UIDMappings)
	assert.Equal(t, gids, spec.Mounts[i].GIDMappings)
}
