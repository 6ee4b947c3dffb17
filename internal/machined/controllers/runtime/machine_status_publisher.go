package runtime

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/events"
)

// MachineStatusPublisherController publishes a MachineStatusEvent on the node's event bus at
// every change of MachineStatus (stage, readiness, unmet conditions), as upstream's: clients
// that wait on the Events stream for "running and ready" (Omni, the event sink) see it.
type MachineStatusPublisherController struct {
	Events *events.Bus
}

// Name implements controller.Controller.
func (ctrl *MachineStatusPublisherController) Name() string {
	return "runtime.MachineStatusPublisherController"
}

// Inputs implements controller.Controller.
func (ctrl *MachineStatusPublisherController) Inputs() []controller.Input {
	return []controller.Input{{
		Namespace: runtimeres.NamespaceName, Type: runtimeres.MachineStatusType,
		ID: optional.Some(runtimeres.MachineStatusID), Kind: controller.InputWeak,
	}}
}

// Outputs implements controller.Controller.
func (ctrl *MachineStatusPublisherController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *MachineStatusPublisherController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	last := ""

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		ms, err := safe.ReaderGetByID[*runtimeres.MachineStatus](ctx, r, runtimeres.MachineStatusID)
		if state.IsNotFoundError(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("machine status: %w", err)
		}

		// One event per version: a controller restart does not repeat the last one.
		if v := ms.Metadata().Version().String(); v != last {
			last = v

			ctrl.Events.Publish(MachineStatusEvent(ms.TypedSpec()), "")
		}
	}
}

// MachineStatusEvent is the event form of MachineStatus (machinery's stages share their
// numbers with the API's).
func MachineStatusEvent(spec *runtimeres.MachineStatusSpec) *machine.MachineStatusEvent {
	ev := &machine.MachineStatusEvent{
		Stage:  machine.MachineStatusEvent_MachineStage(spec.Stage),
		Status: &machine.MachineStatusEvent_MachineStatus{Ready: spec.Status.Ready},
	}

	for _, c := range spec.Status.UnmetConditions {
		ev.Status.UnmetConditions = append(ev.Status.UnmetConditions,
			&machine.MachineStatusEvent_MachineStatus_UnmetCondition{Name: c.Name, Reason: c.Reason})
	}

	return ev
}
