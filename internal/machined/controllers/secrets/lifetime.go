package secrets

import (
	"os"
	"time"
)

// LifetimeEnv, when set to a Go duration, overrides the lifetime of the node's certificates.
// Only tests set it (to watch rotation happen).
const LifetimeEnv = "TALOS_TEST_CERT_LIFETIME"

// DefaultLifetime is the lifetime of the node's certificates: a day, as Talos's own.
const DefaultLifetime = 24 * time.Hour

// Lifetime is the lifetime of the node's certificates.
func Lifetime() time.Duration {
	if v := os.Getenv(LifetimeEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}

	return DefaultLifetime
}
