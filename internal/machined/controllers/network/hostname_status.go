package network

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// HostnameStatusController applies the hostname spec and reports the hostname in effect.
// Container mode has no kernel of its own, so applying is recording; metal mode sets the
// kernel hostname before recording.
type HostnameStatusController struct {
	// Apply, when set, makes the hostname effective (sethostname on metal).
	Apply func(hostname, domain string) error
}

// Name implements controller.Controller.
func (ctrl *HostnameStatusController) Name() string { return "network.HostnameStatusController" }

// Inputs implements controller.Controller.
func (ctrl *HostnameStatusController) Inputs() []controller.Input {
	return []controller.Input{{
		Namespace: network.NamespaceName, Type: network.HostnameSpecType,
		ID: optional.Some(network.HostnameID), Kind: controller.InputWeak,
	}}
}

// Outputs implements controller.Controller.
func (ctrl *HostnameStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.HostnameStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *HostnameStatusController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		spec, err := safe.ReaderGetByID[*network.HostnameSpec](ctx, r, network.HostnameID)
		if state.IsNotFoundError(err) {
			continue
		}

		if err != nil {
			return fmt.Errorf("reading hostname spec: %w", err)
		}

		hostname, domain := spec.TypedSpec().Hostname, spec.TypedSpec().Domainname

		if ctrl.Apply != nil {
			if err = ctrl.Apply(hostname, domain); err != nil {
				return fmt.Errorf("setting hostname %s: %w", hostname, err)
			}
		}

		if err = safe.WriterModify(ctx, r, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(res *network.HostnameStatus) error {
			res.TypedSpec().Hostname, res.TypedSpec().Domainname = hostname, domain

			return nil
		}); err != nil {
			return fmt.Errorf("writing hostname status: %w", err)
		}
	}
}
