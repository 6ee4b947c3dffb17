package server

import (
	"context"
	"errors"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/services"
)

// etcdManager returns the node's etcd manager, refusing nodes that do not run etcd.
func (s *Machine) etcdManager(ctx context.Context) (*etcd.Manager, error) {
	switch t := s.R.MachineType(ctx); {
	case t == machinetype.TypeUnknown:
		return nil, status.Error(codes.FailedPrecondition, "the node has no machine config (maintenance mode)")
	case !t.IsControlPlane():
		return nil, status.Error(codes.FailedPrecondition, "etcd runs on control plane nodes only; this node is a "+t.String())
	}

	return s.R.Etcd, nil
}

// etcdError maps the etcd manager's errors to gRPC codes.
func etcdError(err error) error {
	if err == nil {
		return nil
	}

	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}

	code := codes.Internal

	switch {
	case errors.Is(err, etcd.ErrAlreadyBootstrapped), errors.Is(err, etcd.ErrClusterExists):
		code = codes.AlreadyExists
	case errors.Is(err, etcd.ErrJoining), errors.Is(err, etcd.ErrQuorum), errors.Is(err, etcd.ErrNotConfigured),
		errors.Is(err, etcd.ErrNotMember), errors.Is(err, etcd.ErrNoSnapshot):
		code = codes.FailedPrecondition
	case errors.Is(err, etcd.ErrSnapshotHash), errors.Is(err, etcd.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, etcd.ErrNotRunning):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}

	return status.Error(code, err.Error())
}

// Bootstrap starts a new etcd cluster on this control plane (optionally recovered from the
// snapshot uploaded with EtcdRecover). Refused (AlreadyExists) on a node with etcd data, a
// second time, or when a cluster already answers at a peer.
func (s *Machine) Bootstrap(ctx context.Context, req *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	if err := m.Bootstrap(ctx, etcd.BootstrapOptions{Recover: req.GetRecoverEtcd(), SkipHashCheck: req.GetRecoverSkipHashCheck()}); err != nil {
		return nil, etcdError(err)
	}

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{Metadata: s.metadata(ctx)}}}, nil
}

// EtcdMemberList lists the cluster's members (query_local: this member's own view).
func (s *Machine) EtcdMemberList(ctx context.Context, req *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	members, err := m.Members(ctx, req.GetQueryLocal())
	if err != nil {
		return nil, etcdError(err)
	}

	msg := &machine.EtcdMembers{Metadata: s.metadata(ctx)}

	for _, mem := range members {
		msg.LegacyMembers = append(msg.LegacyMembers, mem.Name)
		msg.Members = append(msg.Members, &machine.EtcdMember{
			Id:         mem.ID,
			Hostname:   mem.Name,
			PeerUrls:   mem.PeerURLs,
			ClientUrls: mem.ClientURLs,
			IsLearner:  mem.IsLearner,
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{msg}}, nil
}

// EtcdLeaveCluster removes this node from the cluster (refused if that loses quorum), stops
// its etcd service and wipes its etcd data.
func (s *Machine) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	stop := func(ctx context.Context) error { return s.R.Supervisor.Stop(ctx, services.EtcdServiceID) }

	if err := m.Leave(ctx, stop); err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{Metadata: s.metadata(ctx)}}}, nil
}

// EtcdRemoveMemberByID removes another member (e.g. of a dead node).
func (s *Machine) EtcdRemoveMemberByID(ctx context.Context, req *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	if req.GetMemberId() == 0 {
		return nil, status.Error(codes.InvalidArgument, "member_id is required")
	}

	if err := m.RemoveMember(ctx, req.GetMemberId()); err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{Metadata: s.metadata(ctx)}}}, nil
}

// EtcdForfeitLeadership hands leadership to another member if this one leads.
func (s *Machine) EtcdForfeitLeadership(ctx context.Context, _ *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	leader, err := m.ForfeitLeadership(ctx)
	if err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{{Metadata: s.metadata(ctx), Member: leader}}}, nil
}

// EtcdSnapshot streams a snapshot of this member's database (ending with its SHA-256).
func (s *Machine) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	m, err := s.etcdManager(srv.Context())
	if err != nil {
		return err
	}

	rc, err := m.Snapshot(srv.Context())
	if err != nil {
		return etcdError(err)
	}
	defer rc.Close()

	return sendChunks(rc, srv.Send, etcdError)
}

// EtcdRecover receives a snapshot for a following Bootstrap with recover_etcd.
func (s *Machine) EtcdRecover(srv grpc.ClientStreamingServer[common.Data, machine.EtcdRecoverResponse]) error {
	m, err := s.etcdManager(srv.Context())
	if err != nil {
		return err
	}

	pr, pw := io.Pipe()

	go func() {
		for {
			msg, err := srv.Recv()
			if errors.Is(err, io.EOF) {
				pw.Close()

				return
			}

			if err != nil {
				pw.CloseWithError(err)

				return
			}

			if _, err := pw.Write(msg.GetBytes()); err != nil {
				return
			}
		}
	}()

	_, err = m.ReceiveSnapshot(pr)
	pr.CloseWithError(io.ErrClosedPipe)

	if err != nil {
		return etcdError(err)
	}

	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{Metadata: s.metadata(srv.Context())}}})
}

// EtcdStatus is this member's status.
func (s *Machine) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	st, err := m.Status(ctx)
	if err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{
		Metadata: s.metadata(ctx),
		MemberStatus: &machine.EtcdMemberStatus{
			MemberId:         st.Header.GetMemberId(),
			ProtocolVersion:  st.Version,
			StorageVersion:   st.StorageVersion,
			DbSize:           st.DbSize,
			DbSizeInUse:      st.DbSizeInUse,
			Leader:           st.Leader,
			RaftIndex:        st.RaftIndex,
			RaftTerm:         st.RaftTerm,
			RaftAppliedIndex: st.RaftAppliedIndex,
			Errors:           st.Errors,
			IsLearner:        st.IsLearner,
		},
	}}}, nil
}

func toMemberAlarms(alarms []*etcdserverpb.AlarmMember) []*machine.EtcdMemberAlarm {
	out := make([]*machine.EtcdMemberAlarm, 0, len(alarms))

	for _, a := range alarms {
		out = append(out, &machine.EtcdMemberAlarm{
			MemberId: a.MemberID,
			Alarm:    machine.EtcdMemberAlarm_AlarmType(a.Alarm),
		})
	}

	return out
}

// EtcdAlarmList lists the cluster's alarms.
func (s *Machine) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	alarms, err := m.AlarmList(ctx)
	if err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{Metadata: s.metadata(ctx), MemberAlarms: toMemberAlarms(alarms)}}}, nil
}

// EtcdAlarmDisarm disarms every alarm of the cluster.
func (s *Machine) EtcdAlarmDisarm(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmDisarmResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	alarms, err := m.AlarmDisarm(ctx)
	if err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdAlarmDisarmResponse{Messages: []*machine.EtcdAlarmDisarm{{Metadata: s.metadata(ctx), MemberAlarms: toMemberAlarms(alarms)}}}, nil
}

// EtcdDefragment defragments this member's database (it blocks the member meanwhile).
func (s *Machine) EtcdDefragment(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdDefragmentResponse, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	if err := m.Defragment(ctx); err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdDefragmentResponse{Messages: []*machine.EtcdDefragment{{Metadata: s.metadata(ctx)}}}, nil
}
