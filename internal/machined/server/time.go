package server

import (
	"context"
	"time"

	"github.com/beevik/ntp"
	timeapi "github.com/siderolabs/talos/pkg/machinery/api/time"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Time implements the TimeService: the node asks an NTP server for the time and answers with
// its own clock beside the server's, as upstream's `talosctl time` shows them.
type Time struct {
	timeapi.UnimplementedTimeServiceServer

	M *Machine
}

// ntpTimeout bounds one query, so a silent server fails the call instead of hanging it.
const ntpTimeout = 5 * time.Second

// Time queries the first NTP server of the machine config (machine.time.servers).
func (t *Time) Time(ctx context.Context, _ *emptypb.Empty) (*timeapi.TimeResponse, error) {
	cfg := t.M.R.Config()
	if cfg == nil || cfg.Machine() == nil {
		return nil, status.Error(codes.FailedPrecondition, "the node has no config")
	}

	servers := cfg.Machine().Time().Servers()
	if len(servers) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the config names no NTP server (machine.time.servers): set one, or ask a server with --check")
	}

	return t.query(ctx, servers[0])
}

// TimeCheck queries the server the request names.
func (t *Time) TimeCheck(ctx context.Context, req *timeapi.TimeRequest) (*timeapi.TimeResponse, error) {
	if req.GetServer() == "" {
		return nil, status.Error(codes.InvalidArgument, "server: name an NTP server (host or host:port)")
	}

	return t.query(ctx, req.GetServer())
}

func (t *Time) query(ctx context.Context, server string) (*timeapi.TimeResponse, error) {
	resp, err := ntp.QueryWithOptions(server, ntp.QueryOptions{Timeout: ntpTimeout})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "querying NTP server %s: %v", server, err)
	}

	if err = resp.Validate(); err != nil {
		return nil, status.Errorf(codes.Unavailable, "NTP server %s: %v", server, err)
	}

	return &timeapi.TimeResponse{Messages: []*timeapi.Time{{
		Metadata:   t.M.metadata(ctx),
		Server:     server,
		Localtime:  timestamppb.New(time.Now()),
		Remotetime: timestamppb.New(resp.Time),
	}}}, nil
}
