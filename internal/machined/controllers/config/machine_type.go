// Package config holds controllers whose outputs derive from the machine config.
package config

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"
)

// MachineTypeController derives MachineType from the active MachineConfig.
type MachineTypeController struct{}

// Name implements controller.Controller.
func (ctrl *MachineTypeController) Name() string { return "config.MachineTypeController" }

// Inputs implements controller.Controller.
func (ctrl *MachineTypeController) Inputs() []controller.Input {
	return []controller.Input{{
		Namespace: config.NamespaceName, Type: config.MachineConfigType,
		ID: optional.Some(config.ActiveID), Kind: controller.InputWeak,
	}}
}

// Outputs implements controller.Controller.
func (ctrl *MachineTypeController) Outputs() []controller.Output {
	return []controller.Output{{Type: config.MachineTypeType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineTypeController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading machine config: %w", err)
		}

		if cfg == nil || cfg.Config().Machine() == nil {
			continue // maintenance mode: the type is unknown
		}

		machineType := cfg.Config().Machine().Type()

		if err = safe.WriterModify(ctx, r, config.NewMachineType(), func(res *config.MachineType) error {
			res.SetMachineType(machineType)
			return nil
		}); err != nil {
			return fmt.Errorf("writing machine type: %w", err)
		}
	}
}
