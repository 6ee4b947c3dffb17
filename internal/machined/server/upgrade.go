package server

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Upgrades is what the API asks of machined for upgrades, rollbacks and resets
// (internal/machined/upgrade.Manager). Errors say their kind (internal/machined/errkind);
// apiError turns them into gRPC statuses.
type Upgrades interface {
	// Upgrade verifies the image and starts the upgrade; it returns the acknowledgement.
	Upgrade(ctx context.Context, req *machine.UpgradeRequest, actor string) (string, error)
	// Rollback makes the previous slot active and reboots.
	Rollback(ctx context.Context) error
	// Reset validates the request and starts the reset.
	Reset(ctx context.Context, req *machine.ResetRequest, actor string) error
}

var errNoUpgrades = status.Error(codes.Unimplemented, "upgrades are not available on this node")

// Upgrade installs a signed image into the inactive slot and reboots into it.
func (s *Machine) Upgrade(ctx context.Context, req *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	if s.Upgrades == nil {
		return nil, errNoUpgrades
	}

	actor := newActorID()

	ack, err := s.Upgrades.Upgrade(ctx, req, actor)
	if err != nil {
		return nil, apiError(err)
	}

	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Metadata: s.metadata(ctx), Ack: ack, ActorId: actor}}}, nil
}

// Rollback boots the previous version again.
func (s *Machine) Rollback(ctx context.Context, _ *machine.RollbackRequest) (*machine.RollbackResponse, error) {
	if s.Upgrades == nil {
		return nil, errNoUpgrades
	}

	if err := s.Upgrades.Rollback(ctx); err != nil {
		return nil, apiError(err)
	}

	return &machine.RollbackResponse{Messages: []*machine.Rollback{{Metadata: s.metadata(ctx)}}}, nil
}

// Reset wipes the node's system partitions and reboots or stops it.
func (s *Machine) Reset(ctx context.Context, req *machine.ResetRequest) (*machine.ResetResponse, error) {
	if s.Upgrades == nil {
		return nil, errNoUpgrades
	}

	actor := newActorID()

	if err := s.Upgrades.Reset(ctx, req, actor); err != nil {
		return nil, apiError(err)
	}

	return &machine.ResetResponse{Messages: []*machine.Reset{{Metadata: s.metadata(ctx), ActorId: actor}}}, nil
}
