package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/talos-go/talos/internal/eventsink"
	"github.com/talos-go/talos/internal/machined/events"
)

// EventSinkConfigController declares EventSinkConfig: the endpoint of the config's
// EventSinkConfig document; none, no resource.
type EventSinkConfigController = transform.Controller[*config.MachineConfig, *runtimeres.EventSinkConfig]

// NewEventSinkConfigController is upstream's EventSinkConfigController (without the
// talos.events.sink kernel argument: no node here reads one).
func NewEventSinkConfigController() *EventSinkConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *runtimeres.EventSinkConfig]{
			Name: "runtime.EventSinkConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*runtimeres.EventSinkConfig] {
				if cfg.Metadata().ID() != config.ActiveID || cfg.Config().Runtime().EventsEndpoint() == nil {
					return optional.None[*runtimeres.EventSinkConfig]()
				}

				return optional.Some(runtimeres.NewEventSinkConfig())
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *runtimeres.EventSinkConfig) error {
				out.TypedSpec().Endpoint = *cfg.Config().Runtime().EventsEndpoint()

				return nil
			},
		},
	)
}

// EventsSinkController publishes the node's events to the EventSinkConfig endpoint over
// gRPC (EventSinkService.Publish, plaintext), as upstream's: first every event the bus still
// holds, then each new one, in order. An event the sink does not take is tried again every
// second; a new endpoint goes on after the last event sent.
type EventsSinkController struct {
	Events *events.Bus

	mu     sync.Mutex
	lastID string // the last event the sink took
}

// Name implements controller.Controller.
func (ctrl *EventsSinkController) Name() string { return "runtime.EventsSinkController" }

// Inputs implements controller.Controller.
func (ctrl *EventsSinkController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: runtimeres.NamespaceName, Type: runtimeres.EventSinkConfigType, ID: optional.Some(runtimeres.EventSinkConfigID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *EventsSinkController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *EventsSinkController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	var (
		endpoint string
		stop     = func() {}
	)

	defer func() { stop() }()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*runtimeres.EventSinkConfig](ctx, r, runtimeres.EventSinkConfigID)
		if err != nil && !state.IsNotFoundError(err) {
			return err
		}

		want := ""
		if cfg != nil {
			want = cfg.TypedSpec().Endpoint
		}

		if want == endpoint {
			continue
		}

		stop()

		stop, endpoint = func() {}, want

		if endpoint == "" {
			continue
		}

		conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Warn("events are not sent: the event sink endpoint is not host:port", zap.String("endpoint", endpoint), zap.Error(err))

			continue
		}

		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})

		go func() {
			defer close(done)

			ctrl.send(wctx, conn, log)
		}()

		stop = func() {
			cancel()
			<-done
			conn.Close() // nothing left to send on it
		}

		log.Info("events are sent to the event sink", zap.String("endpoint", endpoint))
	}
}

// send publishes the bus's events on conn until ctx ends.
func (ctrl *EventsSinkController) send(ctx context.Context, conn *grpc.ClientConn, log *zap.Logger) {
	ctrl.mu.Lock()
	opts := events.TailOptions{Events: -1, ID: ctrl.lastID}
	ctrl.mu.Unlock()

	ctrl.Events.Watch(ctx, opts, func(ev events.Event) error { //nolint:errcheck // ends with ctx
		data, err := anypb.New(ev.Payload)
		if err != nil {
			log.Warn("an event that cannot be encoded is not sent", zap.String("id", ev.ID), zap.Error(err))

			return nil
		}

		for warned := false; ; warned = true {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = eventsink.Publish(pctx, conn, eventsink.Event{ID: ev.ID, ActorID: ev.ActorID, Data: data})

			cancel()

			if err == nil {
				break
			}

			if !warned {
				log.Warn("the event sink does not take events; trying again every second", zap.Error(err))
			}

			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}

		ctrl.mu.Lock()
		ctrl.lastID = ev.ID
		ctrl.mu.Unlock()

		return nil
	})
}
