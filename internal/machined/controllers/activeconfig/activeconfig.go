// Package activeconfig is the loop of the controllers that redo their work from the active
// machine config each time it, or another of their inputs, changes.
package activeconfig

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
)

// Get is the active machine config; nil (no error) while the node has none.
func Get(ctx context.Context, r controller.Reader) (*config.MachineConfig, error) {
	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil, nil
		}

		return nil, fmt.Errorf("reading machine config: %w", err)
	}

	return cfg, nil
}

// Run calls reconcile with the active machine config (nil while there is none) on each of r's
// events, the first at start, until ctx ends; an error from reconcile stops the controller.
func Run(ctx context.Context, r controller.Runtime, reconcile func(cfg *config.MachineConfig) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := Get(ctx, r)
		if err != nil {
			return err
		}

		if err = reconcile(cfg); err != nil {
			return err
		}
	}
}
