package system_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

func TestMain(m *testing.M) {
	system.BackoffMin = 10 * time.Millisecond
	goleak.VerifyTestMain(m)
}

// recorder notes the order in which services start and stop.
type recorder struct {
	mu    sync.Mutex
	order []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.order = append(r.order, s)
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

func blockingService(id string, rec *recorder, deps ...string) *system.Service {
	// The service reports healthy only after its main has recorded its start: "running" alone
	// is set when the goroutine is launched, before main runs, so a dependent could record first.
	var started atomic.Bool
	return &system.Service{
		ID:        id,
		DependsOn: deps,
		HealthFunc: func(context.Context) error {
			if !started.Load() {
				return errors.New("not started yet")
			}
			return nil
		},
		HealthSettings: system.HealthSettings{InitialDelay: time.Millisecond, Period: 5 * time.Millisecond},
		Runner: func() (system.Runner, error) {
			return &runner.Goroutine{Name: id, Main: func(ctx context.Context, _ io.Writer) error {
				rec.add("start " + id)
				started.Store(true)
				<-ctx.Done()
				time.Sleep(5 * time.Millisecond) // give a wrong stop order a chance to show
				rec.add("stop " + id)
				return nil
			}}, nil
		},
	}
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func waitUp(t *testing.T, s *system.Supervisor, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := s.WaitFor(ctx, id, system.IsUp); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDependencyOrderAndReverseStop(t *testing.T) {
	rec := &recorder{}
	s := system.NewSupervisor(zap.NewNop(), nil)
	// c depends on b depends on a; loaded and started in the wrong order on purpose.
	s.Load(blockingService("c", rec, "b"), blockingService("b", rec, "a"), blockingService("a", rec))
	if err := s.Start("c", "b", "a"); err != nil {
		t.Fatal(err)
	}
	waitUp(t, s, "a", "b", "c")

	if err := s.StopAll(context.Background()); err != nil {
		t.Fatal(err)
	}

	got := rec.get()
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if len(got) != len(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}

	for _, info := range s.List() {
		if info.State != system.StateFinished {
			t.Errorf("%s: state %s after StopAll", info.ID, info.State)
		}
	}
	if err := s.Start("a"); err == nil {
		t.Error("start after StopAll must be refused")
	}
}

func TestStopStopsDependentsFirst(t *testing.T) {
	rec := &recorder{}
	s := system.NewSupervisor(zap.NewNop(), nil)
	s.Load(blockingService("db", rec), blockingService("app", rec, "db"), blockingService("other", rec))
	_ = s.Start()
	waitUp(t, s, "db", "app", "other")

	if err := s.Stop(context.Background(), "db"); err != nil {
		t.Fatal(err)
	}
	got := rec.get()
	if index(got, "stop app") < 0 || index(got, "stop app") > index(got, "stop db") {
		t.Fatalf("app must stop before db: %v", got)
	}
	if info, _ := s.Get("other"); info.State != system.StateRunning {
		t.Fatalf("unrelated service state %s", info.State)
	}
	_ = s.StopAll(context.Background())
}

func TestRestartAfterCrash(t *testing.T) {
	var runs atomic.Int32
	s := system.NewSupervisor(zap.NewNop(), nil)
	s.Load(&system.Service{
		ID: "crashy",
		Runner: func() (system.Runner, error) {
			return &runner.Goroutine{Name: "crashy", Main: func(ctx context.Context, _ io.Writer) error {
				if runs.Add(1) < 3 {
					return errors.New("boom")
				}
				<-ctx.Done()
				return nil
			}}, nil
		},
	})
	_ = s.Start("crashy")
	waitUp(t, s, "crashy")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Running after two failures: the third run. (The run counter is bumped only after the state
	// change that wakes WaitFor, so the condition reads the history.)
	failures := func(i system.Info) int {
		n := 0
		for _, ev := range i.Events {
			if ev.State == system.StateFailed {
				n++
			}
		}
		return n
	}
	if err := s.WaitFor(ctx, "crashy", func(i system.Info) bool { return failures(i) == 2 && i.State == system.StateRunning }); err != nil {
		t.Fatal(err)
	}

	for runs.Load() < 3 {
		time.Sleep(time.Millisecond)
	}

	info, _ := s.Get("crashy")
	failed := 0
	for _, ev := range info.Events {
		if ev.State == system.StateFailed {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("want 2 failures in history, got %d: %+v", failed, info.Events)
	}
	_ = s.StopAll(context.Background())
}

func TestPanicIsAFailure(t *testing.T) {
	s := system.NewSupervisor(zap.NewNop(), nil)
	s.Load(&system.Service{
		ID:      "panicky",
		Restart: system.RestartNever,
		Runner: func() (system.Runner, error) {
			return &runner.Goroutine{Name: "p", Main: func(context.Context, io.Writer) error { panic("oops") }}, nil
		},
	})
	_ = s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, "panicky", func(i system.Info) bool { return i.State == system.StateFailed }); err != nil {
		t.Fatal(err)
	}
	_ = s.StopAll(context.Background())
}

func TestHealthTransitionsGateDependents(t *testing.T) {
	var healthy atomic.Bool
	rec := &recorder{}
	s := system.NewSupervisor(zap.NewNop(), nil)
	base := blockingService("base", rec)
	base.HealthFunc = func(context.Context) error {
		if healthy.Load() {
			return nil
		}
		return errors.New("not ready")
	}
	base.HealthSettings = system.HealthSettings{InitialDelay: time.Millisecond, Period: 10 * time.Millisecond, Timeout: time.Second}
	s.Load(base, blockingService("dependent", rec, "base"))
	_ = s.Start()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, "base", func(i system.Info) bool { return !i.Health.Unknown && !i.Health.Healthy }); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFor(ctx, "dependent", func(i system.Info) bool { return i.State == system.StateWaiting }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // and it stays there while base is unhealthy
	if info, _ := s.Get("dependent"); info.State != system.StateWaiting {
		t.Fatalf("dependent must wait for an unhealthy dependency, state %s", info.State)
	}

	healthy.Store(true)
	waitUp(t, s, "base", "dependent")

	healthy.Store(false)
	if err := s.WaitFor(ctx, "base", func(i system.Info) bool { return !i.Health.Healthy && i.Health.LastMessage == "not ready" }); err != nil {
		t.Fatal(err)
	}
	_ = s.StopAll(context.Background())
}

func TestConditionSkips(t *testing.T) {
	s := system.NewSupervisor(zap.NewNop(), nil)
	s.Load(&system.Service{
		ID:        "cp-only",
		Condition: func(context.Context) error { return errors.New("not a control plane") },
		Runner:    func() (system.Runner, error) { t.Error("runner must not be built"); return nil, nil },
	})
	_ = s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, "cp-only", func(i system.Info) bool { return i.State == system.StateSkipped }); err != nil {
		t.Fatal(err)
	}
	_ = s.StopAll(context.Background())
}
