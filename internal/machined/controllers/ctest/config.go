package ctest

import (
	"sync"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/stretchr/testify/require"
)

// EndpointHost is the control-plane endpoint's host in the configs MachineConfig makes, unless
// patched: a loopback address where nothing listens, so a controller that dials it stays on
// the machine.
const EndpointHost = "127.0.0.100"

// Endpoint is the control-plane endpoint of the configs MachineConfig makes.
const Endpoint = "https://" + EndpointHost + ":6443"

// One cluster's secrets serve every config of a test binary. They are generated under the 1.6
// contract, whose service-account key is ECDSA rather than RSA-4096: no controller here reads
// that key, and making it is most of the time generation takes (7 s of 7.4 s).
var input = sync.OnceValues(func() (*generate.Input, error) {
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_6)
	if err != nil {
		return nil, err
	}

	return generate.NewInput("test", Endpoint, constants.DefaultKubernetesVersion, generate.WithSecretsBundle(bundle))
})

// MachineConfig is the active MachineConfig resource of a node of type typ in the test
// cluster, after patches.
func MachineConfig(t *testing.T, typ machine.Type, patches ...func(*v1alpha1.Config)) *configres.MachineConfig {
	t.Helper()

	in, err := input()
	require.NoError(t, err)

	cfg, err := in.Config(typ)
	require.NoError(t, err)

	patched, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		for _, patch := range patches {
			patch(c)
		}

		return nil
	})
	require.NoError(t, err)

	return configres.NewMachineConfig(patched)
}

// EmptyConfig is a MachineConfig without a v1alpha1 document: no machine section at all.
func EmptyConfig(t *testing.T) *configres.MachineConfig {
	t.Helper()

	c, err := container.New()
	require.NoError(t, err)

	return configres.NewMachineConfig(c)
}
