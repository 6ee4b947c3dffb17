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
	ticker := time.NewTicker(check)
	defer ticker.Stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticker.C:
		}

		if err := reconcile(); err != nil {
			if ctx.Err() != nil {
				return nil
			}

			log.Error(what, zap.Error(err))
		}
	}
}
