package server

import (
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/talos-go/talos/internal/machined/events"
)

// eventTypeURLPrefix starts the type URL of every event's payload, as on Talos.
const eventTypeURLPrefix = "talos/runtime/"

// Events streams the node's events, starting with the requested tail.
func (s *Machine) Events(req *machine.EventsRequest, srv grpc.ServerStreamingServer[machine.Event]) error {
	opts := events.TailOptions{Events: req.TailEvents, ID: req.TailId, Seconds: time.Duration(req.TailSeconds) * time.Second}
	md := s.metadata(srv.Context())

	err := s.R.Events.Watch(srv.Context(), opts, func(ev events.Event) error {
		if req.WithActorId != "" && ev.ActorID != req.WithActorId {
			return nil
		}

		data, err := anypb.New(ev.Payload)
		if err != nil {
			return err
		}

		// Talos's clients recognize events by this type URL (client.UnmarshalEvent).
		data.TypeUrl = eventTypeURLPrefix + string(ev.Payload.ProtoReflect().Descriptor().FullName())

		return srv.Send(&machine.Event{Metadata: md, Data: data, Id: ev.ID, ActorId: ev.ActorID})
	})
	if err != nil && srv.Context().Err() == nil {
		return status.Errorf(codes.Internal, "streaming events: %v", err)
	}

	return nil
}
