package talosctl

import (
	"context"
	"fmt"
	"io"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/version"
	"github.com/spf13/cobra"
)

func versionCmd(g *Global) *cobra.Command {
	var clientOnly, short, insecure bool

	cmd := &cobra.Command{
		Use:   "version",
		Short: "Prints the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()

			fmt.Fprintln(w, "Client:")

			if short {
				fmt.Fprintf(w, "\t%s\n", version.Short())
			} else {
				version.WriteLongVersionFromExisting(w, version.NewVersion())
			}

			if clientOnly {
				return nil
			}

			fmt.Fprintln(w, "Server:")

			if insecure {
				return versionInsecure(cmd, g.Nodes)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.Version(s.ctx(ctx), callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.VersionResponse) error {
					return renderVersion(w, resp, defaultNode())
				})
			})
		},
	}

	cmd.Flags().BoolVar(&clientOnly, "client", false, "print client version only")
	cmd.Flags().BoolVar(&short, "short", false, "print the short version")
	cmd.Flags().BoolVarP(&insecure, "insecure", "i", false, "use Talos maintenance mode API")

	return cmd
}

// versionInsecure asks each node's maintenance API for its version.
func versionInsecure(cmd *cobra.Command, nodes []string) error {
	if len(nodes) == 0 {
		return fmt.Errorf("--insecure needs the node addresses: pass them with -n")
	}

	failed := false

	for _, node := range nodes {
		err := withMaintenanceClient(cmd.Context(), node, func(ctx context.Context, c *client.Client) error {
			resp, err := c.Version(ctx)
			if err != nil {
				return err
			}

			return renderVersion(cmd.OutOrStdout(), resp, node)
		})
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %v%s\n", node, err, hint(err))

			failed = true
		}
	}

	if failed {
		return errSilent
	}

	return nil
}

// renderVersion writes the server part of `talosctl version`.
func renderVersion(w io.Writer, resp *machineapi.VersionResponse, defaultNode string) error {
	for _, msg := range resp.GetMessages() {
		fmt.Fprintf(w, "\t%s        %s\n", "NODE:", nodeOf(msg.GetMetadata().GetHostname(), defaultNode))
		version.WriteLongVersionFromExisting(w, msg.GetVersion())

		if msg.GetFeatures().GetRbac() {
			fmt.Fprintf(w, "\tEnabled:     %s\n", "RBAC")
		}
	}

	return nil
}

func nodeOf(hostname, defaultNode string) string {
	if hostname != "" {
		return hostname
	}

	return defaultNode
}

// renderReply handles a unary multi-node reply: the per-node errors (messages carrying
// metadata.error) go to stderr and make the command fail, the other messages are rendered.
func renderReply[V any, T client.Message[V], MR client.MessageResponse[V, T]](cmd *cobra.Command, resp MR, err error, render func(MR) error) error {
	// The machinery client filters some replies itself (their per-node errors are then in err
	// already); filtering again would drop err, so only raw replies are filtered here.
	if err == nil {
		resp, err = client.FilterMessages[V, T, MR](resp, err)
	}

	if len(resp.GetMessages()) == 0 && err != nil {
		return nodeErrors(cmd.ErrOrStderr(), err)
	}

	if rerr := render(resp); rerr != nil {
		return rerr
	}

	return nodeErrors(cmd.ErrOrStderr(), err)
}
