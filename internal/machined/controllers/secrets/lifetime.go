package secrets

import "time"

// DefaultLifetime is the lifetime of the node's certificates: a day, as Talos's own. Tests that
// watch rotation give machined a shorter one (its hidden --cert-lifetime flag), which reaches
// the controllers through their Lifetime fields.
const DefaultLifetime = 24 * time.Hour

// Lifetime is the lifetime of the node's certificates: d, or DefaultLifetime when d is zero.
func Lifetime(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}

	return DefaultLifetime
}
