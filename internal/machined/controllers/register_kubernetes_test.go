package controllers_test

import (
	"testing"

	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/machined/controllers"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
)

// TestRegisterKubernetesNode: a node that runs Kubernetes registers its controllers without a
// conflict, the Kubernetes discovery registry's among them (its raw affiliates are an output
// shared with the other registries').
func TestRegisterKubernetesNode(t *testing.T) {
	st, err := resources.NewState(t.Context())
	require.NoError(t, err)

	rt, err := cosiruntime.NewRuntime(st, zaptest.NewLogger(t))
	require.NoError(t, err)

	opts := options(t)
	opts.Mode = runtime.Mode{Kind: runtime.Container, PID1: true, HasContainerd: true, HasKubernetesImages: true}

	var names []string
	for _, c := range controllers.List(opts) {
		names = append(names, c.Name())
	}

	assert.Contains(t, names, "cluster.KubernetesPushController")
	assert.Contains(t, names, "cluster.KubernetesPullController")
	require.NoError(t, controllers.Register(rt, opts))
}
