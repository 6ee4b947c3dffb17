package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
)

func eventsCmd(g *Global) *cobra.Command {
	var (
		tail     int32
		since    string
		duration time.Duration
		actorID  string
	)

	cmd := &cobra.Command{
		Use:   "events",
		Short: "Stream runtime events",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []client.EventsOptionFunc

			switch {
			case since != "":
				opts = append(opts, client.WithTailID(since))
			case duration != 0:
				opts = append(opts, client.WithTailDuration(duration))
			default:
				opts = append(opts, client.WithTailEvents(tail))
			}

			if actorID != "" {
				opts = append(opts, client.WithActorID(actorID))
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				stream, err := s.c.Events(s.ctx(ctx), opts...)
				if err != nil {
					return nodeErrors(cmd.ErrOrStderr(), err)
				}

				ew := newEventWriter(cmd.OutOrStdout(), cmd.ErrOrStderr())

				for {
					ev, err := stream.Recv()
					if errors.Is(err, io.EOF) || client.StatusCode(err) == codes.Canceled {
						break
					}

					if err != nil {
						return nodeErrors(cmd.ErrOrStderr(), err)
					}

					ew.write(ev)
				}

				if ew.failed {
					return errSilent
				}

				return nil
			})
		},
	}

	f := cmd.Flags()
	f.Int32Var(&tail, "tail", 0, "show specified number of past events (use -1 to show full history, default is to show no history)")
	f.StringVar(&since, "since", "", "show events after the specified event ID (default is to show no history)")
	f.DurationVar(&duration, "duration", 0, "show events for the past duration interval (one second resolution, default is to show no history)")
	f.StringVar(&actorID, "actor-id", "", "filter events by the specified actor ID (default is no filter)")

	return cmd
}

// eventWriter prints events as table rows, flushing after each one so a stream shows up live.
type eventWriter struct {
	tw     *tabwriter.Writer
	errOut io.Writer
	header bool
	failed bool
}

func newEventWriter(out, errOut io.Writer) *eventWriter {
	return &eventWriter{tw: tabwriter.NewWriter(out, 0, 0, 3, ' ', 0), errOut: errOut}
}

func (ew *eventWriter) write(ev *machineapi.Event) {
	if e := ev.GetMetadata().GetError(); e != "" {
		fmt.Fprintf(ew.errOut, "error: %s: %s\n", ev.GetMetadata().GetHostname(), e)

		ew.failed = true

		return
	}

	if !ew.header {
		fmt.Fprintln(ew.tw, "NODE\tID\tEVENT\tACTOR\tSOURCE\tMESSAGE")

		ew.header = true
	}

	typ := strings.TrimPrefix(ev.GetData().GetTypeUrl(), "talos/runtime/")
	source, message := "", ""

	if e, err := client.UnmarshalEvent(ev); err == nil {
		source, message = describeEvent(e)
	}

	fmt.Fprintf(ew.tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ev.GetMetadata().GetHostname(), ev.GetId(), typ, ev.GetActorId(), source, message)
	ew.tw.Flush()
}

// describeEvent gives the SOURCE and MESSAGE columns of an event.
func describeEvent(e *client.Event) (string, string) {
	switch m := e.Payload.(type) {
	case *machineapi.SequenceEvent:
		if m.GetError() != nil {
			return m.GetSequence(), "error: " + m.GetError().GetMessage()
		}

		return m.GetSequence(), m.GetAction().String()
	case *machineapi.PhaseEvent:
		return m.GetPhase(), m.GetAction().String()
	case *machineapi.TaskEvent:
		return m.GetTask(), m.GetAction().String()
	case *machineapi.ServiceStateEvent:
		msg := m.GetAction().String()
		if m.GetMessage() != "" {
			msg += ": " + m.GetMessage()
		}

		return m.GetService(), msg
	case *machineapi.ConfigLoadErrorEvent:
		return "config", m.GetError()
	case *machineapi.ConfigValidationErrorEvent:
		return "config", m.GetError()
	case *machineapi.AddressEvent:
		return m.GetHostname(), strings.Join(m.GetAddresses(), ",")
	case *machineapi.MachineStatusEvent:
		return "machine", fmt.Sprintf("stage: %s, ready: %v", m.GetStage(), m.GetStatus().GetReady())
	default:
		return "", ""
	}
}
