package controllers_test

import (
	"errors"
	"path/filepath"
	"testing"

	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/controllers"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/trustd"
)

func options(t *testing.T) controllers.Options {
	dir := t.TempDir()

	return controllers.Options{
		Address:          "127.84.0.1",
		Mode:             runtime.Mode{Kind: runtime.Process},
		StateDir:         dir,
		APIDSecretsDir:   filepath.Join(dir, "secrets", "apid"),
		TrustdSecretsDir: filepath.Join(dir, "secrets", "trustd"),

		KubernetesSecretsDir: filepath.Join(dir, "secrets", "kubernetes"),
		KubeletDir:           filepath.Join(dir, "etc", "kubernetes"),
		KubernetesConfigDir:  filepath.Join(dir, "config", "kubernetes"),
		AuditLogDir:          filepath.Join(dir, "log", "audit", "kube"),
		// This node runs no etcd: its member controller publishes nothing.
		Etcd: etcd.NewManager(func() (etcd.Options, error) { return etcd.Options{}, errors.New("no etcd here") }),
	}
}

func TestNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}

	for _, ctrl := range controllers.List(options(t)) {
		assert.False(t, seen[ctrl.Name()], "two controllers named %s", ctrl.Name())
		seen[ctrl.Name()] = true
	}
}

// TestNode runs the node's whole list together, as machined does: without outputs claimed
// twice, a hostname in maintenance mode, and the control plane's secrets once a config comes.
func TestNode(t *testing.T) {
	opts := options(t)
	env := ctest.Start(t, controllers.List(opts)...)

	// Maintenance mode: no config, yet an identity, a hostname and the hardware.
	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameStatus, a *assert.Assertions) {
		a.Equal(networkctrl.GeneratedHostname(opts.Address), r.TypedSpec().Hostname)
	})
	ctest.AssertResource(env, cluster.LocalIdentity, func(r *cluster.Identity, a *assert.Assertions) {
		a.NotEmpty(r.TypedSpec().NodeID)
	})
	ctest.AssertResource(env, hardware.SystemInformationID, func(*hardware.SystemInformation, *assert.Assertions) {})

	// A control-plane config with a hostname.
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkHostname: "cp1"}
	}))

	ctest.AssertResource(env, config.MachineTypeID, func(r *config.MachineType, a *assert.Assertions) {
		a.Equal(machine.TypeControlPlane, r.MachineType())
	})
	ctest.AssertResource(env, network.HostnameID, func(r *network.HostnameStatus, a *assert.Assertions) {
		a.Equal("cp1", r.TypedSpec().Hostname)
	})
	ctest.AssertResource(env, secrets.APIID, func(r *secrets.API, a *assert.Assertions) {
		a.NotNil(r.TypedSpec().Server)
	})
	ctest.AssertResource(env, secrets.TrustdID, func(r *secrets.Trustd, a *assert.Assertions) {
		a.NotNil(r.TypedSpec().Server)
	})
	ctest.AssertResource(env, "cp1", func(r *cluster.Member, a *assert.Assertions) {
		a.Equal(machine.TypeControlPlane, r.TypedSpec().MachineType)
	})

	env.WaitFile(filepath.Join(opts.APIDSecretsDir, certs.ServerCrt))
	env.WaitFile(filepath.Join(opts.TrustdSecretsDir, trustd.ServerCrt))

	// The Kubernetes chain: the control plane's static pods, kubelet's spec, the bootstrap
	// manifests and the files the pods and kubelet read.
	ctest.AssertIDs[*k8s.StaticPod](env, k8s.APIServerID, k8s.ControllerManagerID, k8s.SchedulerID)
	ctest.AssertResource(env, k8s.KubeletID, func(r *k8s.KubeletSpec, a *assert.Assertions) {
		a.Equal("cp1", r.TypedSpec().ExpectedNodename)
		a.Contains(r.TypedSpec().Args, "--node-ip=127.84.0.1")
	})
	ctest.AssertResource(env, "10-kube-proxy", func(*k8s.Manifest, *assert.Assertions) {})
	env.WaitFile(filepath.Join(opts.KubernetesSecretsDir, "kube-apiserver", "apiserver.key"))
	env.WaitFile(filepath.Join(opts.KubeletDir, "bootstrap-kubeconfig"))
	env.WaitFile(filepath.Join(opts.KubernetesConfigDir, "kube-apiserver", "auditpolicy.yaml"))

	assertOnTheWire(t, env)
}

func TestRegister(t *testing.T) {
	st, err := resources.NewState(t.Context())
	require.NoError(t, err)

	rt, err := cosiruntime.NewRuntime(st, zaptest.NewLogger(t))
	require.NoError(t, err)

	opts := options(t)
	require.NoError(t, controllers.Register(rt, opts))

	// Twice is a conflict, and the error names the controller.
	err = controllers.Register(rt, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), controllers.List(opts)[0].Name())
}
