package server

import (
	"context"
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/logging"
)

// ServiceInfo converts a supervisor snapshot to its API form.
func ServiceInfo(info system.Info) *machine.ServiceInfo {
	out := &machine.ServiceInfo{
		Id:     info.ID,
		State:  string(info.State),
		Events: &machine.ServiceEvents{},
		Health: HealthInfo(info.Health),
	}

	for _, ev := range info.Events {
		out.Events.Events = append(out.Events.Events, &machine.ServiceEvent{Msg: ev.Message, State: string(ev.State), Ts: timestamppb.New(ev.Time)})
	}

	return out
}

// HealthInfo converts a health snapshot to its API form.
func HealthInfo(h system.Health) *machine.ServiceHealth {
	out := &machine.ServiceHealth{Unknown: h.Unknown, Healthy: h.Healthy, LastMessage: h.LastMessage}
	if !h.LastChange.IsZero() {
		out.LastChange = timestamppb.New(h.LastChange)
	}

	return out
}

// ServiceList lists the node's services.
func (s *Machine) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machine.ServiceListResponse, error) {
	msg := &machine.ServiceList{Metadata: s.metadata(ctx)}

	for _, info := range s.R.Supervisor.List() {
		msg.Services = append(msg.Services, ServiceInfo(info))
	}

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{msg}}, nil
}

func (s *Machine) knownService(id string) error {
	if _, ok := s.R.Supervisor.Get(id); !ok {
		return status.Errorf(codes.NotFound, "service %q is not registered on this node: see `talosctl services`", id)
	}

	return nil
}

// ServiceStart starts a stopped service.
func (s *Machine) ServiceStart(ctx context.Context, req *machine.ServiceStartRequest) (*machine.ServiceStartResponse, error) {
	if err := s.knownService(req.Id); err != nil {
		return nil, err
	}

	if err := s.R.Supervisor.Start(req.Id); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "starting %s: %v", req.Id, err)
	}

	return &machine.ServiceStartResponse{Messages: []*machine.ServiceStart{{Metadata: s.metadata(ctx), Resp: "Service \"" + req.Id + "\" started"}}}, nil
}

// ServiceStop stops a service and its dependents.
func (s *Machine) ServiceStop(ctx context.Context, req *machine.ServiceStopRequest) (*machine.ServiceStopResponse, error) {
	if err := s.knownService(req.Id); err != nil {
		return nil, err
	}

	if err := s.R.Supervisor.Stop(ctx, req.Id); err != nil {
		return nil, status.Errorf(codes.Internal, "stopping %s: %v", req.Id, err)
	}

	return &machine.ServiceStopResponse{Messages: []*machine.ServiceStop{{Metadata: s.metadata(ctx), Resp: "Service \"" + req.Id + "\" stopped"}}}, nil
}

// ServiceRestart stops and starts a service.
func (s *Machine) ServiceRestart(ctx context.Context, req *machine.ServiceRestartRequest) (*machine.ServiceRestartResponse, error) {
	if err := s.knownService(req.Id); err != nil {
		return nil, err
	}

	if err := s.R.Supervisor.Stop(ctx, req.Id); err != nil {
		return nil, status.Errorf(codes.Internal, "stopping %s: %v", req.Id, err)
	}

	if err := s.R.Supervisor.Start(req.Id); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "starting %s: %v", req.Id, err)
	}

	return &machine.ServiceRestartResponse{Messages: []*machine.ServiceRestart{{Metadata: s.metadata(ctx), Resp: "Service \"" + req.Id + "\" restarted"}}}, nil
}

// Logs streams a service's log, with a tail and optionally following.
func (s *Machine) Logs(req *machine.LogsRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	if req.Driver == common.ContainerDriver_CRI || req.Namespace == criNamespace {
		return s.criLogs(req, srv)
	}

	// System containers (etcd) write to their service's log.
	if req.Namespace != "" && req.Namespace != "system" {
		return status.Errorf(codes.InvalidArgument, "namespace %q: logs are of system (services) or k8s.io (CRI containers)", req.Namespace)
	}

	md := s.metadata(srv.Context())

	err := s.R.Logs.Read(srv.Context(), req.Id, int(req.TailLines), req.Follow, func(b []byte) error {
		return srv.Send(&common.Data{Metadata: md, Bytes: b})
	})
	if errors.Is(err, logging.ErrNotFound) {
		// Upstream answers a plain error here, which grpc sends as Unknown: clients see the
		// same code and words from us.
		return status.Errorf(codes.Unknown, "log %q was not registered: see `talosctl services` for service IDs", req.Id)
	}

	if err != nil && srv.Context().Err() == nil {
		return status.Errorf(codes.Internal, "reading log %s: %v", req.Id, err)
	}

	return nil
}
