package k8s_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

// The node name waits for the config's hostname: while the hostname is still the generated one,
// no Nodename is published (kubelet would bootstrap under the wrong name), so the one published
// is made once, with the configured name.
func TestNodenameWaitsForTheConfiguredHostname(t *testing.T) {
	env := ctest.Start(t, k8sctrl.NewNodenameController())

	env.Create(append(node("talos-m60-53e"), ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{NetworkHostname: "bench-controlplane-3"}
	}))...)

	ctest.Update(env, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname = "bench-controlplane-3"

		return nil
	})

	ctest.AssertResource(env, k8s.NodenameID, func(r *k8s.Nodename, a *assert.Assertions) {
		a.Equal("bench-controlplane-3", r.TypedSpec().Nodename)
		// Created once: never first with the generated name.
		a.Equal(uint64(1), r.Metadata().Version().Value())
	})
}
