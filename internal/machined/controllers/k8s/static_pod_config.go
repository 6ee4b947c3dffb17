package k8s

import (
	"context"
	"errors"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// StaticPodConfigController publishes machine.pods as StaticPod resources, as upstream: one per
// pod, named <namespace>-<name> (namespace default when the pod names none). The static pod
// server serves them to kubelet with the control plane's, so a config change or removal reaches
// kubelet without a reboot. It shares StaticPod with StaticPodController: each cleans up its own.
type StaticPodConfigController struct{}

// Name implements controller.Controller.
func (ctrl *StaticPodConfigController) Name() string { return "k8s.StaticPodConfigController" }

// Inputs implements controller.Controller.
func (ctrl *StaticPodConfigController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *StaticPodConfigController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.StaticPodType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *StaticPodConfigController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err := ctrl.reconcile(ctx, r, log); err != nil {
			return err
		}
	}
}

func (ctrl *StaticPodConfigController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading machine config: %w", err)
	}

	r.StartTrackingOutputs()

	if cfg != nil && cfg.Config().Machine() != nil {
		for i, pod := range cfg.Config().Machine().Pods() {
			// Validate refused such a pod; one that got here anyway is left out, not the rest.
			id, err := StaticPodID(pod)
			if err != nil {
				log.Error("leaving out a static pod of the config", zap.Int("index", i), zap.Error(err))

				continue
			}

			p, err := plain(pod)
			if err != nil {
				log.Error("leaving out a static pod of the config", zap.String("id", id), zap.Error(err))

				continue
			}

			if err = safe.WriterModify(ctx, r, k8s.NewStaticPod(k8s.NamespaceName, id), func(res *k8s.StaticPod) error {
				res.TypedSpec().Pod = p

				return nil
			}); err != nil {
				// Another controller's pod of the same ID (a control plane component's).
				log.Error("writing a static pod of the config", zap.String("id", id), zap.Error(err))
			}
		}
	}

	return safe.CleanupOutputs[*k8s.StaticPod](ctx, r)
}

// StaticPodID is the StaticPod resource ID of a pod of machine.pods, <namespace>-<name>, or
// why the pod cannot be a static pod: it is not kind Pod, or has no metadata.name.
func StaticPodID(pod map[string]any) (string, error) {
	if kind, _ := pod["kind"].(string); kind != "Pod" {
		return "", fmt.Errorf("kind %q: a static pod is kind Pod (apiVersion v1)", kind)
	}

	md, _ := pod["metadata"].(map[string]any)

	name, _ := md["name"].(string)
	if name == "" {
		return "", errors.New("metadata.name: missing; give the pod a name (kubelet names its mirror pod <name>-<node>)")
	}

	ns, ok := md["namespace"].(string)
	if _, set := md["namespace"]; set && (!ok || ns == "") {
		return "", errors.New("metadata.namespace: not a namespace name; give one or leave it out (default)")
	}

	if ns == "" {
		ns = "default"
	}

	return ns + "-" + name, nil
}

// CheckPods refuses machine.pods items that are not static pods, each error naming
// machine.pods[i] and the fix.
func CheckPods(pods []map[string]any) error {
	var errs []error

	for i, pod := range pods {
		if _, err := StaticPodID(pod); err != nil {
			errs = append(errs, fmt.Errorf("machine.pods[%d]: %w", i, err))
		}
	}

	return errors.Join(errs...)
}
