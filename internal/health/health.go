// Package health holds the cluster checks that `talosctl health` (on the client, or on the node
// through ClusterService/HealthCheck) and `talosctl cluster create` wait for, named as upstream's
// checks so their progress reads the same.
package health

import (
	"context"
	"fmt"
	"time"
)

// Check is one condition of a healthy cluster.
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// Nodes are the cluster nodes a check expects, by address.
type Nodes struct {
	ControlPlanes []string
	Workers       []string
	// Disabled are the control plane components the control planes do not run (their config
	// disables them: DisabledComponents), not waited for.
	Disabled []string
}

// All returns every expected node address, control planes first.
func (n Nodes) All() []string {
	return append(append([]string(nil), n.ControlPlanes...), n.Workers...)
}

// Run runs the checks in order, retrying each every interval until it passes or ctx ends, and
// reports upstream's progress lines ("waiting for X", "X: OK" or the last error).
func Run(ctx context.Context, checks []Check, interval time.Duration, report func(line string)) error {
	for _, c := range checks {
		report("waiting for " + c.Name)

		start := time.Now()

		var last string

		for {
			err := c.Run(ctx)
			if err == nil {
				report(fmt.Sprintf("waiting for %s: OK (%s)", c.Name, time.Since(start).Round(10*time.Millisecond)))

				break
			}

			if msg := err.Error(); msg != last {
				report(fmt.Sprintf("waiting for %s: %s", c.Name, msg))
				last = msg
			}

			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w (last: %s)", c.Name, ctx.Err(), last)
			case <-time.After(interval):
			}
		}
	}

	return nil
}
