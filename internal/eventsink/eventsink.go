// Package eventsink speaks upstream's event sink protocol (siderolink's api/events:
// events.EventSinkService/Publish), which a node uses to push its events to the endpoint of
// an EventSinkConfig document (upstream's talos.events.sink=). The siderolink module is not
// served here, so the schema is declared below from its published facts (package, service,
// method, field names and numbers) and the messages are dynamic: the bytes on the wire are
// the same as those of its generated code.
package eventsink

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// PublishMethod is the full gRPC method name of EventSinkService.Publish.
const PublishMethod = "/events.EventSinkService/Publish"

// Event is one EventRequest: the event's ID, its actor's ID and its payload (a machine API
// event message, as an Any).
type Event struct {
	ID      string
	ActorID string
	Data    *anypb.Any
}

var requestDesc, responseDesc = descriptors()

// descriptors builds events/events.proto:
//
//	message EventRequest { google.protobuf.Any data = 1; string id = 2; string actor_id = 3; }
//	message EventResponse {}
//	service EventSinkService { rpc Publish(EventRequest) returns (EventResponse); }
func descriptors() (protoreflect.MessageDescriptor, protoreflect.MessageDescriptor) {
	field := func(name, jsonName string, number int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), JsonName: proto.String(jsonName), Number: proto.Int32(number),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: typ.Enum(),
		}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}

		return f
	}

	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("events/events.proto"), Package: proto.String("events"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/any.proto"},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("EventRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("data", "data", 1, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Any"),
				field("id", "id", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
				field("actor_id", "actorId", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
			}},
			{Name: proto.String("EventResponse")},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("EventSinkService"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Publish"), InputType: proto.String(".events.EventRequest"), OutputType: proto.String(".events.EventResponse"),
			}},
		}},
	}

	// A private registry with Any only: the schema never clashes with another package's
	// "events" registered globally.
	files := new(protoregistry.Files)
	if err := files.RegisterFile(anypb.File_google_protobuf_any_proto); err != nil {
		panic(err)
	}

	fd, err := protodesc.NewFile(file, files)
	if err != nil {
		panic(fmt.Sprintf("eventsink: the EventSinkService schema: %v", err))
	}

	return fd.Messages().ByName("EventRequest"), fd.Messages().ByName("EventResponse")
}

// Request encodes ev as an EventRequest message.
func Request(ev Event) proto.Message {
	m := dynamicpb.NewMessage(requestDesc)
	fields := requestDesc.Fields()

	if ev.Data != nil {
		m.Set(fields.ByName("data"), protoreflect.ValueOfMessage(ev.Data.ProtoReflect()))
	}

	if ev.ID != "" {
		m.Set(fields.ByName("id"), protoreflect.ValueOfString(ev.ID))
	}

	if ev.ActorID != "" {
		m.Set(fields.ByName("actor_id"), protoreflect.ValueOfString(ev.ActorID))
	}

	return m
}

// decode reads an EventRequest message.
func decode(m *dynamicpb.Message) (Event, error) {
	fields := requestDesc.Fields()
	ev := Event{ID: m.Get(fields.ByName("id")).String(), ActorID: m.Get(fields.ByName("actor_id")).String()}

	if m.Has(fields.ByName("data")) {
		b, err := proto.Marshal(m.Get(fields.ByName("data")).Message().Interface())
		if err != nil {
			return ev, err
		}

		ev.Data = &anypb.Any{}
		if err = proto.Unmarshal(b, ev.Data); err != nil {
			return ev, err
		}
	}

	return ev, nil
}

// Publish sends ev to the sink on conn.
func Publish(ctx context.Context, conn grpc.ClientConnInterface, ev Event) error {
	return conn.Invoke(ctx, PublishMethod, Request(ev), dynamicpb.NewMessage(responseDesc))
}

// Register serves EventSinkService on s, calling fn for every event published; an error from
// fn is the call's.
func Register(s grpc.ServiceRegistrar, fn func(context.Context, Event) error) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "events.EventSinkService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Publish",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				req := dynamicpb.NewMessage(requestDesc)
				if err := dec(req); err != nil {
					return nil, err
				}

				ev, err := decode(req)
				if err != nil {
					return nil, err
				}

				if err = fn(ctx, ev); err != nil {
					return nil, err
				}

				return dynamicpb.NewMessage(responseDesc), nil
			},
		}},
		Metadata: "events/events.proto",
	}, struct{}{})
}
