package runtime

import (
	"context"
	"net/url"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/go-kmsg"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/system/logsend"
)

// KmsgLogConfigController declares KmsgLogConfig: the destinations of the config's
// KmsgLogConfig documents; none, no resource.
type KmsgLogConfigController = transform.Controller[*config.MachineConfig, *runtimeres.KmsgLogConfig]

// NewKmsgLogConfigController is upstream's KmsgLogConfigController (without the
// talos.logging.kernel kernel argument: no node here reads one).
func NewKmsgLogConfigController() *KmsgLogConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *runtimeres.KmsgLogConfig]{
			Name: "runtime.KmsgLogConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*runtimeres.KmsgLogConfig] {
				if cfg.Metadata().ID() != config.ActiveID || len(cfg.Config().Runtime().KmsgLogURLs()) == 0 {
					return optional.None[*runtimeres.KmsgLogConfig]()
				}

				return optional.Some(runtimeres.NewKmsgLogConfig())
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *runtimeres.KmsgLogConfig) error {
				out.TypedSpec().Destinations = cfg.Config().Runtime().KmsgLogURLs()

				return nil
			},
		},
	)
}

// KmsgLogDeliveryController sends the kernel log to the KmsgLogConfig destinations as JSON
// lines, as upstream's: from the oldest message the kernel still holds, then each new one. Its
// place in the log is kept across config changes, so a new destination gets what comes next.
type KmsgLogDeliveryController struct {
	// Open opens the kernel log (kmsg.NewReader with Follow when nil).
	Open func() (kmsg.Reader, error)
}

// Name implements controller.Controller.
func (ctrl *KmsgLogDeliveryController) Name() string { return "runtime.KmsgLogDeliveryController" }

// Inputs implements controller.Controller.
func (ctrl *KmsgLogDeliveryController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: runtimeres.NamespaceName, Type: runtimeres.KmsgLogConfigType, ID: optional.Some(runtimeres.KmsgLogConfigID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *KmsgLogDeliveryController) Outputs() []controller.Output { return nil }

// kmsgSendTimeout is how long a message waits for a destination whose queue is full (it is
// away or slow) before it is dropped there; the destination is told of the gap.
const kmsgSendTimeout = 5 * time.Second

// Run implements controller.Controller.
func (ctrl *KmsgLogDeliveryController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	var (
		sender  *logsend.Sender
		dests   []*url.URL
		reader  kmsg.Reader
		packets <-chan kmsg.Packet
	)

	defer func() {
		if sender != nil {
			sender.Close()
		}

		if reader != nil {
			reader.Close() // read only
		}
	}()

	for {
		var in <-chan kmsg.Packet // read only while there is somewhere to send
		if sender != nil {
			in = packets
		}

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
			cfg, err := safe.ReaderGetByID[*runtimeres.KmsgLogConfig](ctx, r, runtimeres.KmsgLogConfigID)
			if err != nil && !state.IsNotFoundError(err) {
				return err
			}

			var want []*url.URL
			if cfg != nil {
				want = cfg.TypedSpec().Destinations
			}

			if slices.EqualFunc(dests, want, func(a, b *url.URL) bool { return a.String() == b.String() }) {
				continue
			}

			if sender != nil {
				sender.Close()
				sender = nil
			}

			dests = want

			if len(dests) == 0 {
				continue
			}

			if reader == nil {
				if reader, err = ctrl.open(); err != nil {
					log.Warn("the kernel log is not sent: it cannot be read", zap.Error(err))

					reader, dests = nil, nil

					continue
				}

				packets = reader.Scan(ctx)
			}

			if sender, err = logsend.New(destinations(dests)); err != nil {
				log.Warn("the kernel log is not sent", zap.Error(err))

				continue
			}

			log.Info("the kernel log is sent", zap.Stringers("destinations", dests))
		case p, ok := <-in:
			if !ok {
				return nil
			}

			if p.Err != nil {
				log.Warn("reading the kernel log", zap.Error(p.Err))

				continue
			}

			sctx, cancel := context.WithTimeout(ctx, kmsgSendTimeout)
			sender.Deliver(sctx, KmsgFields(p.Message))
			cancel()
		}
	}
}

func (ctrl *KmsgLogDeliveryController) open() (kmsg.Reader, error) {
	if ctrl.Open != nil {
		return ctrl.Open()
	}

	return kmsg.NewReader(kmsg.Follow())
}

func destinations(urls []*url.URL) []logsend.Destination {
	out := make([]logsend.Destination, 0, len(urls))
	for _, u := range urls {
		out = append(out, logsend.Destination{Endpoint: u})
	}

	return out
}

// KmsgFields are the JSON fields of one kernel message, upstream's: msg, talos-time (the
// message's time), talos-level (from its priority), facility, seq, clock and priority.
func KmsgFields(m kmsg.Message) map[string]any {
	return map[string]any{
		"msg":         m.Message,
		"talos-time":  m.Timestamp.Format(time.RFC3339Nano),
		"talos-level": kmsgLevel(m.Priority),
		"facility":    m.Facility.String(),
		"seq":         m.SequenceNumber,
		"clock":       m.Clock,
		"priority":    m.Priority.String(),
	}
}

// kmsgLevel is upstream's mapping of a kernel priority to a zap level's name.
func kmsgLevel(p kmsg.Priority) string {
	switch p {
	case kmsg.Debug:
		return "debug"
	case kmsg.Info, kmsg.Notice:
		return "info"
	case kmsg.Warning:
		return "warn"
	default: // emerg, alert, crit, err
		return "error"
	}
}
