// Package version is the version of this build, set at link time with
// -ldflags "-X github.com/talos-go/talos/internal/version.Tag=v1.11.1".
package version

import "runtime"

// Build information.
var (
	Name = "Talos"
	Tag  = "v1.11.0"
	SHA  = "undefined"
	// Built is the build time.
	Built = ""
)

// GoVersion is the Go toolchain that built the binary.
func GoVersion() string { return runtime.Version() }
