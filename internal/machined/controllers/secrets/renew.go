package secrets

import (
	"context"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"go.uber.org/zap"
)

// renewClock is the time source of a renewing controller: the wall clock unless a test sets Now, and
// how often it is checked.
type renewClock struct {
	Now   func() time.Time
	Check time.Duration
}

func (c renewClock) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}

	return time.Now()
}

// renewLoop runs reconcile on every input change and on every check of the wall clock, until
// ctx ends. A failed reconcile is logged and retried on the next wake-up.
func renewLoop(ctx context.Context, r controller.Runtime, log *zap.Logger, check time.Duration, what string, reconcile func() error) error {
	ticks, stop := newCheckTicker(check, log)
	defer stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticks:
		}

		if err := reconcile(); err != nil {
			if ctx.Err() != nil {
				return nil
			}

			log.Error(what, zap.Error(err))
		}
	}
}

// jumpProbe is how often the wall clock is compared with the monotonic clock, and jumpMin the
// difference that counts as a jump.
const (
	jumpProbe = time.Second
	jumpMin   = 2 * time.Second
)

// newCheckTicker fires every interval and, sooner, within a second of a wall clock jump (an NTP
// step, a clock set by hand): timers run on the monotonic clock and do not see a jump, so a
// certificate the new time made invalid would wait for the next check. Its channel holds one
// wake-up at most; stop ends it.
func newCheckTicker(interval time.Duration, log *zap.Logger) (c <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	done := make(chan struct{})

	wake := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}

	go func() {
		check, probe := time.NewTicker(interval), time.NewTicker(jumpProbe)
		defer check.Stop()
		defer probe.Stop()

		last := time.Now()

		for {
			select {
			case <-done:
				return
			case <-check.C:
				wake()
			case <-probe.C:
				now := time.Now()
				// Round(0) drops the monotonic reading: wall time passed minus real time passed.
				if jump := now.Round(0).Sub(last.Round(0)) - now.Sub(last); jump > jumpMin || jump < -jumpMin {
					log.Info("wall clock jumped: checking certificates", zap.Duration("jump", jump.Round(time.Second)))
					wake()
				}

				last = now
			}
		}
	}()

	return ch, func() { close(done) }
}
