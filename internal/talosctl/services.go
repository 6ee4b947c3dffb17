package talosctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"
)

func servicesCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "services",
		Short: "List services",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error { return listServices(ctx, cmd, s) })
		},
	}
}

// listServices prints the services table of every node.
func listServices(ctx context.Context, cmd *cobra.Command, s *session) error {
	callPeer, defaultNode := peerNode()
	resp, err := s.c.MachineClient.ServiceList(s.ctx(ctx), &emptypb.Empty{}, callPeer)

	return renderReply(cmd, resp, err, func(resp *machineapi.ServiceListResponse) error {
		return renderServices(cmd.OutOrStdout(), resp, defaultNode(), time.Now())
	})
}

// renderServices writes the services table.
func renderServices(w io.Writer, resp *machineapi.ServiceListResponse, defaultNode string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSERVICE\tSTATE\tHEALTH\tLAST CHANGE\tLAST EVENT")

	for _, msg := range resp.GetMessages() {
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		for _, svc := range msg.GetServices() {
			lastChange, lastEvent := "", "<none>"

			if events := svc.GetEvents().GetEvents(); len(events) > 0 {
				last := events[len(events)-1]
				lastChange = now.Sub(last.GetTs().AsTime()).Round(time.Second).String() + " ago"
				lastEvent = last.GetMsg()
			}

			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", node, svc.GetId(), svc.GetState(), healthStatus(svc), lastChange, lastEvent)
		}
	}

	return tw.Flush()
}

func healthStatus(svc *machineapi.ServiceInfo) string {
	switch {
	case svc.GetHealth() == nil || svc.GetHealth().GetUnknown():
		return "?"
	case svc.GetHealth().GetHealthy():
		return "OK"
	default:
		return "Fail"
	}
}

func serviceCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "service [<id> [start|stop|restart|status]]",
		Short: "Retrieve the state of a service (or all services), control service state",
		Args:  cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return g.run(cmd, func(ctx context.Context, s *session) error { return listServices(ctx, cmd, s) })
			}

			action := "status"
			if len(args) == 2 {
				action = args[1]
			}

			id := args[0]

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx = s.ctx(ctx)
				callPeer, defaultNode := peerNode()

				switch action {
				case "status":
					resp, err := s.c.MachineClient.ServiceList(ctx, &emptypb.Empty{}, callPeer)

					return renderReply(cmd, resp, err, func(resp *machineapi.ServiceListResponse) error {
						return renderServiceInfo(cmd.OutOrStdout(), resp, id, defaultNode(), time.Now())
					})
				case "start":
					resp, err := s.c.ServiceStart(ctx, id, callPeer)

					return renderReply(cmd, resp, err, func(resp *machineapi.ServiceStartResponse) error {
						return renderServiceAction(cmd.OutOrStdout(), resp.GetMessages(), defaultNode())
					})
				case "stop":
					resp, err := s.c.ServiceStop(ctx, id, callPeer)

					return renderReply(cmd, resp, err, func(resp *machineapi.ServiceStopResponse) error {
						return renderServiceAction(cmd.OutOrStdout(), resp.GetMessages(), defaultNode())
					})
				case "restart":
					resp, err := s.c.ServiceRestart(ctx, id, callPeer)

					return renderReply(cmd, resp, err, func(resp *machineapi.ServiceRestartResponse) error {
						return renderServiceAction(cmd.OutOrStdout(), resp.GetMessages(), defaultNode())
					})
				default:
					return fmt.Errorf("unknown action %q: use start, stop, restart or status", action)
				}
			})
		},
	}
}

// renderServiceInfo writes the detailed state of one service on every node.
func renderServiceInfo(w io.Writer, resp *machineapi.ServiceListResponse, id, defaultNode string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	found := false

	for _, msg := range resp.GetMessages() {
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		for _, svc := range msg.GetServices() {
			if svc.GetId() != id {
				continue
			}

			found = true

			fmt.Fprintf(tw, "NODE\t%s\n", node)
			fmt.Fprintf(tw, "ID\t%s\n", svc.GetId())
			fmt.Fprintf(tw, "STATE\t%s\n", svc.GetState())
			fmt.Fprintf(tw, "HEALTH\t%s\n", healthStatus(svc))

			if m := svc.GetHealth().GetLastMessage(); m != "" {
				fmt.Fprintf(tw, "LAST HEALTH MESSAGE\t%s\n", m)
			}

			label := "EVENTS"
			events := svc.GetEvents().GetEvents()

			for i := len(events) - 1; i >= 0; i-- {
				e := events[i]
				fmt.Fprintf(tw, "%s\t[%s]: %s (%s ago)\n", label, e.GetState(), e.GetMsg(), now.Sub(e.GetTs().AsTime()).Round(time.Second))
				label = ""
			}
		}
	}

	if err := tw.Flush(); err != nil {
		return err
	}

	if !found {
		return fmt.Errorf("service %q is not registered: list services with `talosctl services`", id)
	}

	return nil
}

type serviceActionReply interface {
	GetMetadata() *common.Metadata
	GetResp() string
}

// renderServiceAction writes the NODE/RESPONSE table of start, stop and restart.
func renderServiceAction[T serviceActionReply](w io.Writer, msgs []T, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESPONSE")

	for _, m := range msgs {
		fmt.Fprintf(tw, "%s\t%s\n", nodeOf(m.GetMetadata().GetHostname(), defaultNode), m.GetResp())
	}

	return tw.Flush()
}
