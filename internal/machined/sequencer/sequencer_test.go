package sequencer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/events"
)

// names lists a sequence as "phase:task,task" entries.
func names(s Sequence) []string {
	var out []string

	for _, p := range s.Phases {
		var tasks []string
		for _, t := range p.Tasks {
			tasks = append(tasks, t.Name)
		}

		out = append(out, p.Name+":"+strings.Join(tasks, ","))
	}

	return out
}

type noUpgrade struct{}

func (noUpgrade) LockEtcd(context.Context) error       { return nil }
func (noUpgrade) CordonAndDrain(context.Context) error { return nil }
func (noUpgrade) WriteSlot(context.Context) error      { return nil }
func (noUpgrade) StageBootOnce(context.Context) error  { return nil }
func (noUpgrade) LeaveEtcd(context.Context) error      { return nil }
func (noUpgrade) StopServices(context.Context) error   { return nil }
func (noUpgrade) WipeEphemeral(context.Context) error  { return nil }
func (noUpgrade) SetBootOnce(context.Context) error    { return nil }
func (noUpgrade) Reboot(context.Context) error         { return nil }

func TestUpgradePhases(t *testing.T) {
	for _, tc := range []struct {
		opts UpgradeOptions
		want string
	}{
		{UpgradeOptions{}, "drain:cordonAndDrain install:writeSlot stopServices:stopAllServices wipe:wipeEphemeral reboot:setBootOnce,reboot"},
		{UpgradeOptions{Preserve: true}, "drain:cordonAndDrain install:writeSlot stopServices:stopAllServices reboot:setBootOnce,reboot"},
		{UpgradeOptions{ControlPlane: true}, "etcd:lockEtcd drain:cordonAndDrain install:writeSlot leave:leaveEtcd stopServices:stopAllServices wipe:wipeEphemeral reboot:setBootOnce,reboot"},
		{UpgradeOptions{ControlPlane: true, Preserve: true, Stage: true}, "etcd:lockEtcd drain:cordonAndDrain install:writeSlot stage:stageBootOnce"},
	} {
		if got := strings.Join(names(Upgrade(noUpgrade{}, tc.opts)), " "); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.opts, got, tc.want)
		}
	}
}

type noReset struct{}

func (noReset) CordonAndDrain(context.Context) error { return nil }
func (noReset) LeaveEtcd(context.Context) error      { return nil }
func (noReset) StopServices(context.Context) error   { return nil }
func (noReset) Wipe(context.Context) error           { return nil }
func (noReset) Reboot(context.Context) error         { return nil }
func (noReset) Shutdown(context.Context) error       { return nil }

func TestResetPhases(t *testing.T) {
	for _, tc := range []struct {
		opts ResetOptions
		want string
	}{
		{ResetOptions{}, "stopServices:stopAllServices wipe:wipeSystemPartitions shutdown:shutdown"},
		{ResetOptions{Graceful: true, Reboot: true}, "drain:cordonAndDrain stopServices:stopAllServices wipe:wipeSystemPartitions reboot:reboot"},
		{ResetOptions{Graceful: true, ControlPlane: true}, "drain:cordonAndDrain leave:leaveEtcd stopServices:stopAllServices wipe:wipeSystemPartitions shutdown:shutdown"},
		{ResetOptions{ControlPlane: true}, "stopServices:stopAllServices wipe:wipeSystemPartitions shutdown:shutdown"},
	} {
		if got := strings.Join(names(Reset(noReset{}, tc.opts)), " "); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.opts, got, tc.want)
		}
	}
}

// Run runs tasks in order, stops at the first failure and publishes each step.
func TestRun(t *testing.T) {
	var ran []string

	task := func(name string, err error) Task {
		return T(name, func(context.Context) error {
			ran = append(ran, name)

			return err
		})
	}

	seq := New("test").
		Append("one", task("a", nil), task("b", nil)).
		AppendWhen(false, "skipped", task("never", nil)).
		Append("two", task("c", errors.New("broken")), task("d", nil))

	bus := events.NewBus()

	err := seq.Run(context.Background(), bus, zap.NewNop(), "actor")
	if err == nil || !strings.Contains(err.Error(), "phase two, task c: broken") {
		t.Fatalf("error %v", err)
	}

	if !slices.Equal(ran, []string{"a", "b", "c"}) {
		t.Fatalf("ran %v", ran)
	}

	var got []string

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	bus.Watch(ctx, events.TailOptions{Events: -1}, func(ev events.Event) error {
		switch p := ev.Payload.(type) {
		case *machine.SequenceEvent:
			got = append(got, fmt.Sprintf("seq %s %s %v", p.Sequence, p.Action, p.Error != nil))

			if p.Action == machine.SequenceEvent_STOP {
				cancel()
			}
		case *machine.PhaseEvent:
			got = append(got, "phase "+p.Phase+" "+p.Action.String())
		case *machine.TaskEvent:
			got = append(got, "task "+p.Task+" "+p.Action.String())
		}

		return nil
	})

	want := []string{
		"seq test START false", "phase one START", "task a START", "task a STOP", "task b START", "task b STOP", "phase one STOP",
		"phase two START", "task c START", "task c STOP", "seq test STOP true",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
}
