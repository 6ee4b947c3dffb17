// Package config holds controllers whose outputs derive from the machine config.
package config

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"
)

// MachineTypeController derives MachineType from the active MachineConfig.
type MachineTypeController = transform.Controller[*config.MachineConfig, *config.MachineType]

// NewMachineTypeController declares MachineType: machine.type of the active config. A config
// without a machine section leaves the type as it was (unknown until one has it).
func NewMachineTypeController() *MachineTypeController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *config.MachineType]{
			Name: "config.MachineTypeController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*config.MachineType] {
				if cfg.Metadata().ID() != config.ActiveID {
					return optional.None[*config.MachineType]()
				}

				return optional.Some(config.NewMachineType())
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *config.MachineType) error {
				if cfg.Config().Machine() == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no machine section")
				}

				out.SetMachineType(cfg.Config().Machine().Type())

				return nil
			},
		},
	)
}
