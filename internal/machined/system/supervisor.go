package system

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// maxHistory bounds each service's state history.
const maxHistory = 30

// Backoff bounds the delay between restarts of a crashing service.
var (
	BackoffMin = 200 * time.Millisecond
	BackoffMax = 30 * time.Second
)

// Supervisor owns the services of one node.
type Supervisor struct {
	log     *zap.Logger
	onState func(id string, ev StateEvent, h Health)

	mu       sync.Mutex
	services map[string]*instance
	changed  chan struct{} // closed and replaced on any state or health change
	stopping bool
}

type instance struct {
	svc     *Service
	state   State
	history []StateEvent
	health  Health

	cancel context.CancelFunc
	done   chan struct{} // closed when the run goroutine ends; nil when not started
}

// NewSupervisor creates a supervisor. onState, when set, is called on each state change (to
// publish events); it must not call back into the supervisor.
func NewSupervisor(log *zap.Logger, onState func(id string, ev StateEvent, h Health)) *Supervisor {
	if onState == nil {
		onState = func(string, StateEvent, Health) {}
	}

	return &Supervisor{log: log, onState: onState, services: map[string]*instance{}, changed: make(chan struct{})}
}

// Load registers services without starting them. A service already loaded is replaced only
// when it is not running.
func (s *Supervisor) Load(svcs ...*Service) {
	s.mu.Lock()
	defer s.mu.Unlock()

	for _, svc := range svcs {
		if old, ok := s.services[svc.ID]; ok && old.done != nil {
			select {
			case <-old.done:
			default:
				continue
			}
		}

		inst := &instance{svc: svc, health: Health{Unknown: true}}
		s.services[svc.ID] = inst
		s.setStateLocked(inst, StateInitialized, "Service registered")
	}
}

func (s *Supervisor) setStateLocked(inst *instance, st State, msg string) {
	ev := StateEvent{State: st, Message: msg, Time: time.Now()}
	inst.state = st
	inst.history = append(inst.history, ev)

	if len(inst.history) > maxHistory {
		inst.history = slices.Clone(inst.history[len(inst.history)-maxHistory:])
	}

	s.log.Info("service state", zap.String("service", inst.svc.ID), zap.String("state", string(st)), zap.String("message", msg))
	s.onState(inst.svc.ID, ev, inst.health)
	s.notifyLocked()
}

func (s *Supervisor) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Supervisor) setState(inst *instance, st State, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.setStateLocked(inst, st, msg)
}

// Start starts the named services (all loaded services when none are named). Each waits for
// its dependencies on its own; Start does not block.
func (s *Supervisor) Start(ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	if s.stopping {
		return errors.New("supervisor is shutting down")
	}

	if len(ids) == 0 {
		for id := range s.services {
			ids = append(ids, id)
		}
	}

	for _, id := range ids {
		inst, ok := s.services[id]
		if !ok {
			return fmt.Errorf("service %q is not registered", id)
		}

		if inst.done != nil {
			select {
			case <-inst.done:
			default:
				continue // already running
			}
		}

		ctx, cancel := context.WithCancel(context.Background())
		inst.cancel = cancel
		inst.done = make(chan struct{})
		inst.health = Health{Unknown: true}

		go s.run(ctx, inst, inst.done)
	}

	return nil
}

// isUp reports whether a service counts as up for its dependents.
func (inst *instance) isUp() bool {
	if inst.state != StateRunning {
		return false
	}

	return inst.svc.HealthFunc == nil || (!inst.health.Unknown && inst.health.Healthy)
}

// waitDeps blocks until every dependency is up.
func (s *Supervisor) waitDeps(ctx context.Context, inst *instance) error {
	reported := ""

	for {
		s.mu.Lock()
		changed := s.changed

		var pending []string

		for _, dep := range inst.svc.DependsOn {
			d, ok := s.services[dep]
			if !ok || !d.isUp() {
				pending = append(pending, dep)
			}
		}

		if len(pending) == 0 {
			s.mu.Unlock()
			return nil
		}

		msg := fmt.Sprintf("Waiting for service %s to be up", joinQuoted(pending))
		if msg != reported {
			s.setStateLocked(inst, StateWaiting, msg)
			reported = msg
		}
		s.mu.Unlock()

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func joinQuoted(ids []string) string {
	sort.Strings(ids)
	out := ""

	for i, id := range ids {
		if i > 0 {
			out += ", "
		}

		out += fmt.Sprintf("%q", id)
	}

	return out
}

func (s *Supervisor) run(ctx context.Context, inst *instance, done chan struct{}) {
	defer close(done)

	svc := inst.svc
	s.setState(inst, StatePreparing, "Running pre stage")

	if err := s.waitDeps(ctx, inst); err != nil {
		s.setState(inst, StateFinished, "Service stopped before it started")
		return
	}

	if svc.Condition != nil {
		s.setState(inst, StateWaiting, "Waiting for "+orDefault(svc.ConditionDescription, "condition"))

		if err := svc.Condition(ctx); err != nil {
			if ctx.Err() != nil {
				s.setState(inst, StateFinished, "Service stopped before it started")
			} else {
				s.setState(inst, StateSkipped, err.Error())
			}

			return
		}
	}

	backoff := BackoffMin

	for {
		runner, err := svc.Runner()
		if err != nil {
			s.setState(inst, StateFailed, fmt.Sprintf("Failed to create runner: %v", err))
			return
		}

		started := time.Now()

		s.setState(inst, StateRunning, fmt.Sprintf("Service started as %s", runner))

		healthCtx, stopHealth := context.WithCancel(ctx)
		healthDone := make(chan struct{})

		go func() {
			defer close(healthDone)
			s.checkHealth(healthCtx, inst)
		}()

		err = runner.Run(ctx)

		stopHealth()
		<-healthDone

		s.mu.Lock()
		inst.health = Health{Unknown: true}
		s.mu.Unlock()

		if ctx.Err() != nil {
			s.setState(inst, StateFinished, "Service finished successfully")
			return
		}

		switch {
		case err == nil && svc.Restart != RestartAlways:
			s.setState(inst, StateFinished, "Service finished successfully")
			return
		case err != nil && svc.Restart == RestartNever:
			s.setState(inst, StateFailed, fmt.Sprintf("Service failed: %v", err))
			return
		}

		if time.Since(started) > BackoffMax {
			backoff = BackoffMin // it ran for a good while: not a crash loop
		}

		msg := "Service exited"
		if err != nil {
			msg = fmt.Sprintf("Service failed: %v", err)
		}

		s.setState(inst, StateFailed, msg)
		s.setState(inst, StateWaiting, fmt.Sprintf("Restarting in %s", backoff))

		select {
		case <-ctx.Done():
			s.setState(inst, StateFinished, "Service stopped")
			return
		case <-time.After(backoff):
		}

		backoff = min(backoff*2, BackoffMax)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}

	return s
}

// startPoll is how often a service that has not been healthy yet is checked.
const startPoll = 100 * time.Millisecond

func (s *Supervisor) checkHealth(ctx context.Context, inst *instance) {
	svc := inst.svc
	if svc.HealthFunc == nil {
		return
	}

	settings := svc.HealthSettings
	if settings.InitialDelay == 0 {
		settings.InitialDelay = DefaultHealthSettings.InitialDelay
	}

	if settings.Period == 0 {
		settings.Period = DefaultHealthSettings.Period
	}

	if settings.Timeout == 0 {
		settings.Timeout = DefaultHealthSettings.Timeout
	}

	timer := time.NewTimer(settings.InitialDelay)
	defer timer.Stop()

	everHealthy := false

	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}

		checkCtx, cancel := context.WithTimeout(ctx, settings.Timeout)
		err := svc.HealthFunc(checkCtx)
		cancel()

		if ctx.Err() != nil {
			return
		}

		s.mu.Lock()
		healthy, msg := err == nil, ""
		if err != nil {
			msg = err.Error()
		}

		if inst.health.Unknown || inst.health.Healthy != healthy || inst.health.LastMessage != msg {
			inst.health = Health{Healthy: healthy, LastMessage: msg, LastChange: time.Now()}
			text := "Health check successful"
			if !healthy {
				text = "Health check failed: " + msg
			}

			s.setStateLocked(inst, inst.state, text)
		}
		s.mu.Unlock()

		// Poll fast until the first success, so dependents start as soon as the service is up
		// (containerd, etcd and apid answer within a second or two of starting), then every
		// second while it is unhealthy.
		everHealthy = everHealthy || healthy

		next := settings.Period

		switch {
		case !everHealthy:
			next = min(settings.Period, startPoll)
		case !healthy:
			next = min(settings.Period, time.Second)
		}

		timer.Reset(next)
	}
}

// Stop stops the named services and, first, every service that depends on them.
func (s *Supervisor) Stop(ctx context.Context, ids ...string) error {
	s.mu.Lock()
	set := map[string]bool{}

	var add func(id string)
	add = func(id string) {
		if set[id] {
			return
		}

		set[id] = true

		for other, inst := range s.services {
			if slices.Contains(inst.svc.DependsOn, id) {
				add(other)
			}
		}
	}

	for _, id := range ids {
		if _, ok := s.services[id]; !ok {
			s.mu.Unlock()
			return fmt.Errorf("service %q is not registered", id)
		}

		add(id)
	}
	s.mu.Unlock()

	return s.stopSet(ctx, set)
}

// StopAll stops every service in reverse dependency order and refuses later starts.
func (s *Supervisor) StopAll(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	set := map[string]bool{}

	for id := range s.services {
		set[id] = true
	}
	s.mu.Unlock()

	return s.stopSet(ctx, set)
}

// stopSet stops services in waves: a service is stopped once none of its dependents in the
// set is still running.
func (s *Supervisor) stopSet(ctx context.Context, set map[string]bool) error {
	for len(set) > 0 {
		s.mu.Lock()

		var wave []*instance

		for id := range set {
			blocked := false

			for other := range set {
				if other != id && slices.Contains(s.services[other].svc.DependsOn, id) {
					blocked = true
					break
				}
			}

			if !blocked {
				wave = append(wave, s.services[id])
			}
		}

		if len(wave) == 0 { // a dependency cycle: stop the rest together
			for id := range set {
				wave = append(wave, s.services[id])
			}
		}

		for _, inst := range wave {
			delete(set, inst.svc.ID)

			if inst.cancel != nil && inst.state == StateRunning {
				s.setStateLocked(inst, StateStopping, "Stopping service")
			}

			if inst.cancel != nil {
				inst.cancel()
			}
		}
		s.mu.Unlock()

		for _, inst := range wave {
			if inst.done == nil {
				continue
			}

			select {
			case <-inst.done:
			case <-ctx.Done():
				return fmt.Errorf("stopping service %s: %w", inst.svc.ID, ctx.Err())
			}
		}
	}

	return nil
}

// List returns a snapshot of all services sorted by ID.
func (s *Supervisor) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()

	out := make([]Info, 0, len(s.services))
	for _, inst := range s.services {
		out = append(out, inst.infoLocked())
	}

	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })

	return out
}

// Get returns one service's snapshot.
func (s *Supervisor) Get(id string) (Info, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()

	inst, ok := s.services[id]
	if !ok {
		return Info{}, false
	}

	return inst.infoLocked(), true
}

func (inst *instance) infoLocked() Info {
	running := false
	if inst.done != nil {
		select {
		case <-inst.done:
		default:
			running = true
		}
	}

	return Info{
		ID: inst.svc.ID, State: inst.state, Events: slices.Clone(inst.history), Health: inst.health,
		Running: running, HasHealthCheck: inst.svc.HealthFunc != nil,
	}
}

// WaitFor blocks until cond holds for the service or ctx ends.
func (s *Supervisor) WaitFor(ctx context.Context, id string, cond func(Info) bool) error {
	for {
		s.mu.Lock()
		changed := s.changed
		inst, ok := s.services[id]

		var info Info
		if ok {
			info = inst.infoLocked()
		}
		s.mu.Unlock()

		if ok && cond(info) {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for service %s: %w", id, ctx.Err())
		case <-changed:
		}
	}
}

// IsUp is a WaitFor condition: running, and healthy when the service has a health check.
func IsUp(info Info) bool {
	return info.State == StateRunning && (!info.HasHealthCheck || info.Health.Healthy)
}
