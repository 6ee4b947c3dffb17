// Package server is machined's API: the MachineService and the COSI State API, served on the
// node's unix socket. apid is the only network path to it.
package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/inspect"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	timeapi "github.com/siderolabs/talos/pkg/machinery/api/time"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/unixsock"
)

// Lifecycle is what the API asks of the running machined: config changes and power actions.
type Lifecycle interface {
	// ApplyConfig validates and applies a config in the given mode and returns warnings and
	// a description of what happened (or would happen, for a dry run). Its errors say their
	// kind (internal/machined/errkind).
	ApplyConfig(ctx context.Context, cfg config.Provider, raw []byte, req *machine.ApplyConfigurationRequest) (modeDetails string, mode machine.ApplyConfigurationRequest_Mode, err error)
	Reboot(actorID string) error
	Shutdown(actorID string) error
}

// Machine implements the MachineService. Methods not implemented here answer Unimplemented.
type Machine struct {
	machine.UnimplementedMachineServiceServer

	R         *runtime.Runtime
	Lifecycle Lifecycle
	// Upgrades serves Upgrade, Rollback and Reset; nil answers Unimplemented.
	Upgrades Upgrades
}

// metadata is put on every reply message so apid can tell nodes apart.
func (s *Machine) metadata(ctx context.Context) *common.Metadata {
	return &common.Metadata{Hostname: Hostname(ctx, s.R.State)}
}

// Hostname reads the node's hostname from HostnameStatus.
func Hostname(ctx context.Context, st state.State) string {
	res, err := safe.StateGetByID[*network.HostnameStatus](ctx, st, network.HostnameID)
	if err != nil {
		return ""
	}

	return res.TypedSpec().FQDN()
}

// Serve listens on the machine API socket (owner-only) and serves until ctx ends.
func Serve(ctx context.Context, s *Machine, socketPath string, extra ...func(*grpc.Server)) error {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o700); err != nil {
		return fmt.Errorf("creating socket folder: %w", err)
	}

	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}

	lis, err := unixsock.Listen(socketPath)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", socketPath, err)
	}

	if err = os.Chmod(socketPath, 0o600); err != nil {
		lis.Close()

		return fmt.Errorf("restricting socket %s: %w", socketPath, err)
	}

	srv := NewGRPCServer(s)
	for _, fn := range extra {
		fn(srv)
	}

	errCh := make(chan error, 1)

	go func() { errCh <- srv.Serve(lis) }()

	select {
	case <-ctx.Done():
		// Let replies in flight (e.g. to the Reboot call that got us here) reach their callers;
		// streams that never end are cut after a grace period.
		stopped := make(chan struct{})

		go func() {
			srv.GracefulStop()
			close(stopped)
		}()

		select {
		case <-stopped:
		case <-time.After(time.Second):
			srv.Stop()
			<-stopped
		}

		_ = <-errCh // Serve returns once stopped; the stop was ours

		return nil
	case err = <-errCh:
		return err
	}
}

// NewGRPCServer registers the MachineService and a read-only COSI State API.
func NewGRPCServer(s *Machine) *grpc.Server {
	srv := grpc.NewServer(
		// One message limit on every hop of the API (apid's router and pool use it too), as
		// upstream's clients expect: a larger reply fails here, not past a hop that refuses it.
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.MaxSendMsgSize(constants.GRPCMaxMessageSize),
		// Fixed flow-control windows spare apid's forwarded calls grpc's per-call BDP ping.
		grpc.InitialWindowSize(4<<20),
		grpc.InitialConnWindowSize(4<<20),
	)
	machine.RegisterMachineServiceServer(srv, s)
	clusterapi.RegisterClusterServiceServer(srv, &Cluster{M: s})
	inspect.RegisterInspectServiceServer(srv, &Inspect{R: s.R})
	timeapi.RegisterTimeServiceServer(srv, &Time{M: s})
	storage.RegisterStorageServiceServer(srv, Storage{M: s})
	cosiapi.RegisterStateServer(srv, cosiserver.NewState(state.Filter(s.R.State, readOnly)))

	return srv
}

// readOnly refuses writes through the API: only controllers write resources, except an admin's
// JoinDecision (talosctl join approve|deny, docs/join-approval.md).
func readOnly(ctx context.Context, access state.Access) error {
	if access.Verb.Readonly() {
		return checkSensitive(ctx, access)
	}

	if access.ResourceNamespace == cluster.NamespaceName && access.ResourceType == resources.JoinDecisionType {
		return checkAdminWrite(ctx)
	}

	return status.Errorf(codes.PermissionDenied, "resources are read-only through the API: change the machine config instead")
}

// checkAdminWrite lets only os:admin write (apid checks it first; this holds for any other way
// in). A call on the socket without asserted roles comes from the node itself.
func checkAdminWrite(ctx context.Context) error {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil
	}

	asserted := md.Get(constants.APIAuthzRoleMetadataKey)
	if len(asserted) == 0 {
		return nil
	}

	roles, _ := role.Parse(asserted)
	if !roles.Includes(role.Admin) {
		return status.Errorf(codes.PermissionDenied, "deciding a join request requires role %s", role.Admin)
	}

	return nil
}
