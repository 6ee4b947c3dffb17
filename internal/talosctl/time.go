package talosctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	timeapi "github.com/siderolabs/talos/pkg/machinery/api/time"
	"github.com/spf13/cobra"
)

// timeCmd shows each node's clock beside an NTP server's, through the node's TimeService: the
// node itself queries the server (its configured one, or the one --check names).
func timeCmd(g *Global) *cobra.Command {
	var check string

	cmd := &cobra.Command{
		Use:   "time [--check server]",
		Short: "Gets current server time",
		Long: `Gets the node's current time and an NTP server's, as the node sees them.

Without --check the node asks the first server of its config (machine.time.servers); talosctl
names no default server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()

				var (
					resp *timeapi.TimeResponse
					err  error
				)

				if check == "" {
					resp, err = s.c.Time(s.ctx(ctx), callPeer)
				} else {
					resp, err = s.c.TimeCheck(s.ctx(ctx), check, callPeer)
				}

				return renderReply(cmd, resp, err, func(resp *timeapi.TimeResponse) error {
					return renderTime(cmd.OutOrStdout(), resp, defaultNode())
				})
			})
		},
	}

	cmd.Flags().StringVarP(&check, "check", "c", "", "checks server time against specified ntp server (default: the node's configured server)")

	return cmd
}

// renderTime prints upstream's columns: NODE, NTP-SERVER, NODE-TIME, NTP-SERVER-TIME.
func renderTime(w io.Writer, resp *timeapi.TimeResponse, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNTP-SERVER\tNODE-TIME\tNTP-SERVER-TIME")

	for _, msg := range resp.GetMessages() {
		node := defaultNode
		if msg.GetMetadata().GetHostname() != "" {
			node = msg.GetMetadata().GetHostname()
		}

		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", node, msg.GetServer(),
			msg.GetLocaltime().AsTime().Format(time.RFC3339Nano), msg.GetRemotetime().AsTime().Format(time.RFC3339Nano))
	}

	return tw.Flush()
}
