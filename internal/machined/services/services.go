// Package services declares the node's system services, one file each; the boot starts the
// ones All returns.
package services

import (
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
)

// All returns the services of a configured node.
func All(r *runtime.Runtime) []*system.Service {
	var svcs []*system.Service

	for _, build := range registry {
		svcs = append(svcs, build(r))
	}

	return svcs
}

// registry lists the service constructors; each service file adds itself in an init.
var registry []func(r *runtime.Runtime) *system.Service

// register adds a service constructor to All.
func register(build func(r *runtime.Runtime) *system.Service) {
	registry = append(registry, build)
}
