package eventsink_test

import (
	"context"
	"net"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/talos-go/talos/internal/eventsink"
)

// TestRequestWireFormat checks the EventRequest bytes field by field against siderolink's
// events.proto: data = 1 (Any), id = 2, actor_id = 3.
func TestRequestWireFormat(t *testing.T) {
	data, err := anypb.New(&machine.SequenceEvent{Sequence: "boot"})
	if err != nil {
		t.Fatal(err)
	}

	b, err := proto.Marshal(eventsink.Request(eventsink.Event{ID: "e1", ActorID: "a1", Data: data}))
	if err != nil {
		t.Fatal(err)
	}

	got := map[protowire.Number][]byte{}

	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			t.Fatalf("field %d: wire type %d, want bytes", num, typ)
		}

		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			t.Fatalf("field %d: bad length", num)
		}

		got[num] = v
		b = b[n+m:]
	}

	wantData, _ := proto.Marshal(data)
	if string(got[1]) != string(wantData) || string(got[2]) != "e1" || string(got[3]) != "a1" {
		t.Fatalf("fields %q; want data = 1 (%q), id = 2, actor_id = 3", got, wantData)
	}
}

// TestPublishReachesSink publishes over a real gRPC connection to a sink served by Register.
func TestPublishReachesSink(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	got := make(chan eventsink.Event, 1)
	srv := grpc.NewServer()
	eventsink.Register(srv, func(_ context.Context, ev eventsink.Event) error {
		got <- ev

		return nil
	})

	go srv.Serve(ln) // ends with Stop

	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}

	defer conn.Close()

	data, _ := anypb.New(&machine.PhaseEvent{Phase: "install"})
	if err = eventsink.Publish(t.Context(), conn, eventsink.Event{ID: "x", ActorID: "y", Data: data}); err != nil {
		t.Fatal(err)
	}

	ev := <-got

	payload, err := ev.Data.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}

	if p, ok := payload.(*machine.PhaseEvent); !ok || p.GetPhase() != "install" || ev.ID != "x" || ev.ActorID != "y" {
		t.Fatalf("sink got %+v (%T %v)", ev, payload, payload)
	}
}
