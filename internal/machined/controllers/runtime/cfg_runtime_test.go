package runtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/go-kmsg"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"

	"github.com/talos-go/talos/internal/eventsink"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
	"github.com/talos-go/talos/internal/machined/events"
	"github.com/talos-go/talos/internal/testenv"
)

// One kernel message as upstream's JSON fields.
func TestKmsgFields(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

	for _, c := range []struct {
		pri   kmsg.Priority
		level string
	}{{kmsg.Emerg, "error"}, {kmsg.Err, "error"}, {kmsg.Warning, "warn"}, {kmsg.Notice, "info"}, {kmsg.Info, "info"}, {kmsg.Debug, "debug"}} {
		b, err := json.Marshal(runtimectrl.KmsgFields(kmsg.Message{Timestamp: at, Message: "hello", Facility: kmsg.Daemon, Priority: c.pri, SequenceNumber: 7, Clock: 42}))
		if err != nil {
			t.Fatal(err)
		}

		want := fmt.Sprintf(`{"clock":42,"facility":"daemon","msg":"hello","priority":%q,"seq":7,"talos-level":%q,"talos-time":"2026-01-02T03:04:05.000006Z"}`, c.pri.String(), c.level)
		if string(b) != want {
			t.Errorf("priority %s:\n got %s\nwant %s", c.pri, b, want)
		}
	}
}

// The real /dev/kmsg to a TCP destination from a KmsgLogConfig resource.
func TestKmsgLogDelivery(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to read and write /dev/kmsg")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	defer ln.Close()

	mark := fmt.Sprintf("talos-go kmsg unit %d", time.Now().UnixNano())
	found := make(chan map[string]any, 1)

	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}

		defer c.Close()

		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && strings.TrimSpace(fmt.Sprint(m["msg"])) == mark {
				found <- m

				return
			}
		}
	}()

	e := ctest.Start(t, &runtimectrl.KmsgLogDeliveryController{})

	cfg := runtimeres.NewKmsgLogConfig()
	cfg.TypedSpec().Destinations = []*url.URL{{Scheme: "tcp", Host: ln.Addr().String()}}
	e.Create(cfg)

	testenv.WaitFor(t, "the mark at the destination", 30*time.Second, func() error {
		if err := os.WriteFile("/dev/kmsg", []byte("<6>"+mark+"\n"), 0); err != nil {
			t.Fatal(err)
		}

		select {
		case m := <-found:
			if m["talos-level"] != "info" || m["facility"] != "user" {
				t.Fatalf("fields: %v", m)
			}

			return nil
		case <-time.After(2 * time.Second):
			return fmt.Errorf("not seen")
		}
	})
}

// The bus's events, those before the config and after, reach a real gRPC sink in order.
func TestEventsSinkController(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu  sync.Mutex
		got []string
	)

	srv := grpc.NewServer()
	eventsink.Register(srv, func(_ context.Context, ev eventsink.Event) error {
		p, err := ev.Data.UnmarshalNew()
		if err != nil {
			return err
		}

		mu.Lock()
		got = append(got, p.(*machine.PhaseEvent).GetPhase()+"/"+ev.ActorID)
		mu.Unlock()

		return nil
	})

	go srv.Serve(ln) // ends with Stop

	defer srv.Stop()

	bus := events.NewBus()
	bus.Publish(&machine.PhaseEvent{Phase: "before"}, "a1")

	e := ctest.Start(t, &runtimectrl.EventsSinkController{Events: bus})

	cfg := runtimeres.NewEventSinkConfig()
	cfg.TypedSpec().Endpoint = ln.Addr().String()
	e.Create(cfg)

	bus.Publish(&machine.PhaseEvent{Phase: "after"}, "a2")

	testenv.WaitFor(t, "both events at the sink", 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()

		if fmt.Sprint(got) != "[before/a1 after/a2]" {
			return fmt.Errorf("sink has %v", got)
		}

		return nil
	})
}
