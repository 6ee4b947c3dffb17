package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
	"github.com/talos-go/talos/internal/machined/events"
)

// TestMachineStatusPublisher: each change of MachineStatus is one MachineStatusEvent on the
// bus, with its stage, readiness and unmet conditions.
func TestMachineStatusPublisher(t *testing.T) {
	bus := events.NewBus()
	env := ctest.Start(t, &runtimectrl.MachineStatusPublisherController{Events: bus})

	got := make(chan *machine.MachineStatusEvent, 10)

	ctx, cancel := context.WithCancel(env.Ctx)
	defer cancel()

	go bus.Watch(ctx, events.TailOptions{Events: -1}, func(ev events.Event) error {
		if ms, ok := ev.Payload.(*machine.MachineStatusEvent); ok {
			got <- ms
		}

		return nil
	})

	next := func() *machine.MachineStatusEvent {
		t.Helper()

		select {
		case ev := <-got:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no MachineStatusEvent published")

			return nil
		}
	}

	ms := runtimeres.NewMachineStatus()
	ms.TypedSpec().Stage = runtimeres.MachineStageBooting
	ms.TypedSpec().Status.UnmetConditions = []runtimeres.UnmetCondition{{Name: "services", Reason: "etcd not running"}}
	env.Create(ms)

	ev := next()
	if ev.Stage != machine.MachineStatusEvent_BOOTING || ev.Status.Ready || len(ev.Status.UnmetConditions) != 1 ||
		ev.Status.UnmetConditions[0].Name != "services" || ev.Status.UnmetConditions[0].Reason != "etcd not running" {
		t.Errorf("booting: got %v", ev)
	}

	ctest.Update(env, ms, func(r *runtimeres.MachineStatus) error {
		r.TypedSpec().Stage = runtimeres.MachineStageRunning
		r.TypedSpec().Status = runtimeres.MachineStatusStatus{Ready: true}

		return nil
	})

	if ev = next(); ev.Stage != machine.MachineStatusEvent_RUNNING || !ev.Status.Ready || len(ev.Status.UnmetConditions) != 0 {
		t.Errorf("running: got %v", ev)
	}
}
