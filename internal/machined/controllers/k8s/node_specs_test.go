package k8s_test

import (
	"testing"

	"github.com/siderolabs/go-pointer"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

// TestNodeSpecs: machine.nodeLabels, nodeAnnotations and nodeTaints become one spec per key
// (a taint's "value:Effect" or "Effect" split), and a key dropped from the config drops its spec.
func TestNodeSpecs(t *testing.T) {
	env := ctest.Start(t, &k8sctrl.NodeSpecController{})

	cfg := ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNodeLabels = map[string]string{"zone.example.com/rack": "r1", "tier": "web"}
		c.MachineConfig.MachineNodeAnnotations = map[string]string{"owner.example.com/team": "infra"}
		c.MachineConfig.MachineNodeTaints = map[string]string{"dedicated": "db:NoSchedule", "gpu": "NoExecute"}
	})
	env.Create(cfg)

	ctest.AssertIDs[*k8s.NodeLabelSpec](env, "tier", "zone.example.com/rack")
	ctest.AssertResource(env, "zone.example.com/rack", func(r *k8s.NodeLabelSpec, a *assert.Assertions) {
		a.Equal(k8s.NodeLabelSpecSpec{Key: "zone.example.com/rack", Value: "r1"}, *r.TypedSpec())
	})
	ctest.AssertResource(env, "owner.example.com/team", func(r *k8s.NodeAnnotationSpec, a *assert.Assertions) {
		a.Equal("infra", r.TypedSpec().Value)
	})
	ctest.AssertResource(env, "dedicated", func(r *k8s.NodeTaintSpec, a *assert.Assertions) {
		a.Equal(k8s.NodeTaintSpecSpec{Key: "dedicated", Value: "db", Effect: "NoSchedule"}, *r.TypedSpec())
	})
	ctest.AssertResource(env, "gpu", func(r *k8s.NodeTaintSpec, a *assert.Assertions) {
		a.Equal(k8s.NodeTaintSpecSpec{Key: "gpu", Effect: "NoExecute"}, *r.TypedSpec())
	})

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNodeLabels = map[string]string{"tier": "db"}
	}))

	ctest.AssertIDs[*k8s.NodeLabelSpec](env, "tier")
	ctest.AssertResource(env, "tier", func(r *k8s.NodeLabelSpec, a *assert.Assertions) { a.Equal("db", r.TypedSpec().Value) })
	ctest.AssertIDs[*k8s.NodeAnnotationSpec](env)
	ctest.AssertIDs[*k8s.NodeTaintSpec](env)
}

// TestNodeSpecsOfAControlPlane: as upstream's, a control plane's specs hold the
// node-role.kubernetes.io/control-plane label and, unless cluster.allowSchedulingOnControlPlanes,
// that key's NoSchedule taint (NodeApplyController puts them on the Node); the config's own
// value for those keys wins.
func TestNodeSpecsOfAControlPlane(t *testing.T) {
	env := ctest.Start(t, &k8sctrl.NodeSpecController{})

	env.Create(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNodeLabels = map[string]string{"tier": "web"}
	}))

	ctest.AssertIDs[*k8s.NodeLabelSpec](env, k8sctrl.ControlPlaneRole, "tier")
	ctest.AssertResource(env, k8sctrl.ControlPlaneRole, func(r *k8s.NodeLabelSpec, a *assert.Assertions) {
		a.Equal(k8s.NodeLabelSpecSpec{Key: k8sctrl.ControlPlaneRole}, *r.TypedSpec())
	})
	ctest.AssertIDs[*k8s.NodeTaintSpec](env, k8sctrl.ControlPlaneRole)
	ctest.AssertResource(env, k8sctrl.ControlPlaneRole, func(r *k8s.NodeTaintSpec, a *assert.Assertions) {
		a.Equal(k8s.NodeTaintSpecSpec{Key: k8sctrl.ControlPlaneRole, Effect: "NoSchedule"}, *r.TypedSpec())
	})

	// Scheduling allowed: the taint goes, the label stays.
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.AllowSchedulingOnControlPlanes = pointer.To(true)
		c.MachineConfig.MachineNodeLabels = nil // gen's exclude-from-external-load-balancers label
	}))

	ctest.AssertIDs[*k8s.NodeTaintSpec](env)
	ctest.AssertIDs[*k8s.NodeLabelSpec](env, k8sctrl.ControlPlaneRole)

	// The config's own taint of that key wins.
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineNodeTaints = map[string]string{k8sctrl.ControlPlaneRole: "PreferNoSchedule"}
	}))

	ctest.AssertResource(env, k8sctrl.ControlPlaneRole, func(r *k8s.NodeTaintSpec, a *assert.Assertions) {
		a.Equal("PreferNoSchedule", r.TypedSpec().Effect)
	})
}

// TestNodeCordonedSpec: Talos wants its Node cordoned while it shuts down, upgrades or resets,
// not once it runs again; a reboot leaves the wish as it was.
func TestNodeCordonedSpec(t *testing.T) {
	env := ctest.Start(t, k8sctrl.NewNodeCordonedSpecController())

	status := runtimeres.NewMachineStatus()
	status.TypedSpec().Stage = runtimeres.MachineStageRunning
	env.Create(status)

	for _, step := range []struct {
		stage    runtimeres.MachineStage
		cordoned bool
	}{
		{runtimeres.MachineStageUpgrading, true},
		{runtimeres.MachineStageRebooting, true},
		{runtimeres.MachineStageRunning, false},
		{runtimeres.MachineStageRebooting, false},
		{runtimeres.MachineStageShuttingDown, true},
		{runtimeres.MachineStageBooting, false},
		{runtimeres.MachineStageResetting, true},
	} {
		ctest.Update(env, status, func(r *runtimeres.MachineStatus) error {
			r.TypedSpec().Stage = step.stage

			return nil
		})

		if step.cordoned {
			ctest.AssertResource(env, k8s.NodeCordonedID, func(*k8s.NodeCordonedSpec, *assert.Assertions) {})
		} else {
			ctest.AssertNoResource[*k8s.NodeCordonedSpec](env, k8s.NodeCordonedID)
		}
	}
}
