package server

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ApplyConfiguration loads and validates a config, then hands it to machined to apply in the
// requested mode. A config that fails loading or validation changes nothing.
func (s *Machine) ApplyConfiguration(ctx context.Context, req *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	cfg, err := configloader.NewFromBytes(req.Data)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "loading config: %v", err)
	}

	warnings, err := s.R.Validate(cfg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}

	details, mode, err := s.Lifecycle.ApplyConfig(ctx, cfg, req.Data, req)
	if err != nil {
		return nil, apiError(err)
	}

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Metadata: s.metadata(ctx), Warnings: warnings, Mode: mode, ModeDetails: details,
	}}}, nil
}

// Reboot restarts the node (container mode: the node process restarts in place).
func (s *Machine) Reboot(ctx context.Context, req *machine.RebootRequest) (*machine.RebootResponse, error) {
	if req.Mode == machine.RebootRequest_POWERCYCLE && s.R.Mode.InContainer() {
		return nil, status.Errorf(codes.InvalidArgument, "powercycle needs real hardware: use the default reboot mode in container mode")
	}

	actor := newActorID()
	if err := s.Lifecycle.Reboot(actor); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "reboot: %v", err)
	}

	return &machine.RebootResponse{Messages: []*machine.Reboot{{Metadata: s.metadata(ctx), ActorId: actor}}}, nil
}

// Shutdown stops the node cleanly.
func (s *Machine) Shutdown(ctx context.Context, _ *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	actor := newActorID()
	if err := s.Lifecycle.Shutdown(actor); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "shutdown: %v", err)
	}

	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{Metadata: s.metadata(ctx), ActorId: actor}}}, nil
}
