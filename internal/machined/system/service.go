// Package system is machined's service supervisor: services declare what they need and how
// they run; the supervisor starts them in dependency order, restarts them when they crash,
// checks their health, and stops them in reverse order.
package system

import (
	"context"
	"time"
)

// Service is the declaration of one supervised service.
type Service struct {
	ID        string
	DependsOn []string // services that must be up (running, and healthy if they have a health check)

	// Condition, when set, blocks until the service may start (e.g. a resource exists).
	Condition            func(ctx context.Context) error
	ConditionDescription string

	// Runner builds the runner for one run of the service.
	Runner func() (Runner, error)

	// HealthFunc, when set, is called periodically while the service runs.
	HealthFunc     func(ctx context.Context) error
	HealthSettings HealthSettings

	// Restart tells what to do when the runner returns.
	Restart RestartPolicy
}

// RestartPolicy tells the supervisor what to do when a service's runner returns.
type RestartPolicy int

const (
	// RestartAlways restarts the service whenever it exits (the default).
	RestartAlways RestartPolicy = iota
	// RestartOnFailure restarts only after a failure; a clean exit finishes the service.
	RestartOnFailure
	// RestartNever runs the service once.
	RestartNever
)

// HealthSettings tune health checks.
type HealthSettings struct {
	InitialDelay time.Duration
	Period       time.Duration
	Timeout      time.Duration
}

// DefaultHealthSettings are used for zero fields.
var DefaultHealthSettings = HealthSettings{
	InitialDelay: 200 * time.Millisecond,
	Period:       5 * time.Second,
	Timeout:      2 * time.Second,
}

// Runner runs a service once: Run blocks until the service exits or ctx is canceled, in which
// case it stops the service gracefully and returns.
type Runner interface {
	Run(ctx context.Context) error
	String() string
}

// State is a service's lifecycle state, named as the machine API reports it.
type State string

// Service states.
const (
	StateInitialized State = "Initialized"
	StatePreparing   State = "Preparing"
	StateWaiting     State = "Waiting"
	StateRunning     State = "Running"
	StateStopping    State = "Stopping"
	StateFinished    State = "Finished"
	StateFailed      State = "Failed"
	StateSkipped     State = "Skipped"
)

// StateEvent is one entry of a service's state history.
type StateEvent struct {
	State   State
	Message string
	Time    time.Time
}

// Health is a service's last health check result.
type Health struct {
	Unknown     bool
	Healthy     bool
	LastMessage string
	LastChange  time.Time
}

// Info is a snapshot of one service for the API.
type Info struct {
	ID      string
	State   State
	Events  []StateEvent
	Health  Health
	Running bool // its run goroutine is alive (waiting, running or restarting)

	HasHealthCheck bool
}
