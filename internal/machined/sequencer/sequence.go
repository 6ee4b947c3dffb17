// Package sequencer declares machined's sequences (sequences.go: boot, maintenance, start,
// shutdown, reboot, upgrade, reset) as named phases of named tasks, and runs them: each start,
// stop and failure is logged and published as an event. The tasks live with the code they
// drive; a sequence names them through a small interface.
package sequencer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/events"
)

// Task is one step of a phase.
type Task struct {
	Name string
	Run  func(ctx context.Context) error
}

// Phase is a group of tasks, run in order.
type Phase struct {
	Name  string
	Tasks []Task
}

// Sequence is a named list of phases.
type Sequence struct {
	Name   string
	Phases []Phase
}

// T declares a task.
func T(name string, run func(ctx context.Context) error) Task { return Task{Name: name, Run: run} }

// New starts the declaration of a sequence.
func New(name string) Sequence { return Sequence{Name: name} }

// Append adds a phase of tasks, run in order.
func (s Sequence) Append(phase string, tasks ...Task) Sequence {
	s.Phases = append(slices.Clip(s.Phases), Phase{Name: phase, Tasks: tasks})

	return s
}

// AppendWhen adds the phase only when cond holds (a phase of one machine type or mode).
func (s Sequence) AppendWhen(cond bool, phase string, tasks ...Task) Sequence {
	if !cond {
		return s
	}

	return s.Append(phase, tasks...)
}

// Run runs every task in order and stops at the first failure.
func (s Sequence) Run(ctx context.Context, bus *events.Bus, log *zap.Logger, actorID string) error {
	start := time.Now()
	log = log.With(zap.String("sequence", s.Name))

	bus.Publish(&machine.SequenceEvent{Sequence: s.Name, Action: machine.SequenceEvent_START}, actorID)
	log.Info("sequence started")

	fail := func(err error) error {
		bus.Publish(&machine.SequenceEvent{
			Sequence: s.Name, Action: machine.SequenceEvent_STOP,
			Error: &common.Error{Code: common.Code_FATAL, Message: err.Error()},
		}, actorID)
		log.Error("sequence failed", zap.Error(err))

		return fmt.Errorf("%s sequence: %w", s.Name, err)
	}

	for i, phase := range s.Phases {
		name := fmt.Sprintf("%d/%d: %s", i+1, len(s.Phases), phase.Name)
		bus.Publish(&machine.PhaseEvent{Phase: phase.Name, Action: machine.PhaseEvent_START}, actorID)
		log.Info("phase", zap.String("phase", name))

		for _, task := range phase.Tasks {
			bus.Publish(&machine.TaskEvent{Task: task.Name, Action: machine.TaskEvent_START}, actorID)
			taskStart := time.Now()

			err := task.Run(ctx)

			bus.Publish(&machine.TaskEvent{Task: task.Name, Action: machine.TaskEvent_STOP}, actorID)

			if err != nil {
				log.Error("task failed", zap.String("phase", phase.Name), zap.String("task", task.Name), zap.Error(err))

				return fail(fmt.Errorf("phase %s, task %s: %w", phase.Name, task.Name, err))
			}

			log.Info("task done", zap.String("task", task.Name), zap.Duration("took", time.Since(taskStart)))
		}

		bus.Publish(&machine.PhaseEvent{Phase: phase.Name, Action: machine.PhaseEvent_STOP}, actorID)
	}

	bus.Publish(&machine.SequenceEvent{Sequence: s.Name, Action: machine.SequenceEvent_STOP}, actorID)
	log.Info("sequence done", zap.Duration("took", time.Since(start)))

	return nil
}
