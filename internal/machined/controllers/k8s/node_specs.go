package k8s

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
)

// ControlPlaneRole is the label and taint key of a control plane node.
const ControlPlaneRole = "node-role.kubernetes.io/control-plane"

// NodeSpecController publishes machine.nodeLabels, machine.nodeAnnotations and
// machine.nodeTaints as upstream's NodeLabelSpec, NodeAnnotationSpec and NodeTaintSpec
// resources, one per key (the key is the ID); NodeApplyController puts them on the Node. As
// upstream's, a control plane also gets the node-role.kubernetes.io/control-plane label and,
// unless cluster.allowSchedulingOnControlPlanes, that key's NoSchedule taint (the kubelet may
// not set node-role labels itself; NodeApplyController writes with the admin credentials there).
type NodeSpecController struct{}

// Name implements controller.Controller.
func (ctrl *NodeSpecController) Name() string { return "k8s.NodeSpecController" }

// Inputs implements controller.Controller.
func (ctrl *NodeSpecController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *NodeSpecController) Outputs() []controller.Output {
	return []controller.Output{
		{Type: k8s.NodeLabelSpecType, Kind: controller.OutputExclusive},
		{Type: k8s.NodeAnnotationSpecType, Kind: controller.OutputExclusive},
		{Type: k8s.NodeTaintSpecType, Kind: controller.OutputExclusive},
	}
}

// Run implements controller.Controller.
func (ctrl *NodeSpecController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		var err error

		var labels, annotations, taints map[string]string

		if cfg != nil && cfg.Config().Machine() != nil {
			m := cfg.Config().Machine()
			labels, annotations, taints = maps.Clone(m.NodeLabels()), m.NodeAnnotations(), maps.Clone(m.NodeTaints())

			if m.Type().IsControlPlane() {
				labels = withDefault(labels, ControlPlaneRole, "")

				if c := cfg.Config().Cluster(); c == nil || !c.ScheduleOnControlPlanes() {
					taints = withDefault(taints, ControlPlaneRole, string(corev1.TaintEffectNoSchedule))
				}
			}
		}

		r.StartTrackingOutputs()

		for key, value := range labels {
			if err = safe.WriterModify(ctx, r, k8s.NewNodeLabelSpec(key), func(res *k8s.NodeLabelSpec) error {
				*res.TypedSpec() = k8s.NodeLabelSpecSpec{Key: key, Value: value}

				return nil
			}); err != nil {
				return fmt.Errorf("node label %s: %w", key, err)
			}
		}

		for key, value := range annotations {
			if err = safe.WriterModify(ctx, r, k8s.NewNodeAnnotationSpec(key), func(res *k8s.NodeAnnotationSpec) error {
				*res.TypedSpec() = k8s.NodeAnnotationSpecSpec{Key: key, Value: value}

				return nil
			}); err != nil {
				return fmt.Errorf("node annotation %s: %w", key, err)
			}
		}

		for key, value := range taints {
			spec := ParseTaint(key, value)

			if err = safe.WriterModify(ctx, r, k8s.NewNodeTaintSpec(key), func(res *k8s.NodeTaintSpec) error {
				*res.TypedSpec() = spec

				return nil
			}); err != nil {
				return fmt.Errorf("node taint %s: %w", key, err)
			}
		}

		if err = r.CleanupOutputs(ctx, k8s.NewNodeLabelSpec("").Metadata(), k8s.NewNodeAnnotationSpec("").Metadata(),
			k8s.NewNodeTaintSpec("").Metadata()); err != nil {
			return err
		}

		return nil
	})
}

// withDefault sets key in m unless the config set it already (the user's value wins).
func withDefault(m map[string]string, key, value string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}

	if _, ok := m[key]; !ok {
		m[key] = value
	}

	return m
}

// ParseTaint reads a machine.nodeTaints entry: "value:Effect", or "Effect" alone (machinery's
// validation has checked the effect).
func ParseTaint(key, value string) k8s.NodeTaintSpecSpec {
	val, effect, found := strings.Cut(value, ":")
	if !found {
		val, effect = "", value
	}

	return k8s.NodeTaintSpecSpec{Key: key, Value: val, Effect: effect}
}
