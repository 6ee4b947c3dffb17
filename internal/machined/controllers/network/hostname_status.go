package network

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// HostnameStatusController applies the hostname spec and reports the hostname in effect.
type HostnameStatusController = transform.Controller[*network.HostnameSpec, *network.HostnameStatus]

// NewHostnameStatusController declares HostnameStatus from HostnameSpec. Container mode has no
// kernel of its own, so applying is recording (apply nil); metal mode passes an apply that sets
// the kernel hostname, and the status follows only once it is set.
func NewHostnameStatusController(apply func(hostname, domain string) error) *HostnameStatusController {
	return transform.NewController(
		transform.Settings[*network.HostnameSpec, *network.HostnameStatus]{
			Name: "network.HostnameStatusController",
			MapMetadataOptionalFunc: func(spec *network.HostnameSpec) optional.Optional[*network.HostnameStatus] {
				if spec.Metadata().ID() != network.HostnameID {
					return optional.None[*network.HostnameStatus]()
				}

				return optional.Some(network.NewHostnameStatus(network.NamespaceName, network.HostnameID))
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, spec *network.HostnameSpec, out *network.HostnameStatus) error {
				hostname, domain := spec.TypedSpec().Hostname, spec.TypedSpec().Domainname

				if apply != nil {
					if err := apply(hostname, domain); err != nil {
						return fmt.Errorf("setting hostname %s: %w", hostname, err)
					}
				}

				out.TypedSpec().Hostname, out.TypedSpec().Domainname = hostname, domain

				return nil
			},
		},
	)
}
