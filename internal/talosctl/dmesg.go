package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
)

func dmesgCmd(g *Global) *cobra.Command {
	var follow, tail bool

	cmd := &cobra.Command{
		Use:   "dmesg",
		Short: "Retrieve kernel logs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				stream, err := s.c.Dmesg(s.ctx(ctx), follow, tail)
				if err != nil {
					return nodeErrors(cmd.ErrOrStderr(), err)
				}

				out, failed := cmd.OutOrStdout(), false
				defaultNode := ""

				if s.local {
					defaultNode = s.nodes[0]
				}

				for {
					data, err := stream.Recv()
					if errors.Is(err, io.EOF) || client.StatusCode(err) == codes.Canceled {
						break
					}

					if err != nil {
						return nodeErrors(cmd.ErrOrStderr(), err)
					}

					node := nodeOf(data.GetMetadata().GetHostname(), defaultNode)

					if e := data.GetMetadata().GetError(); e != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %s\n", node, e)

						failed = true

						continue
					}

					line := data.GetBytes()
					if len(line) > 0 && line[len(line)-1] != '\n' {
						line = append(line, '\n')
					}

					fmt.Fprintf(out, "%s: %s", node, line)
				}

				if failed {
					return errSilent
				}

				return nil
			})
		},
	}

	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "specify if the kernel log should be streamed")
	cmd.Flags().BoolVar(&tail, "tail", false, "specify if only new messages should be sent (makes sense only when combined with --follow)")

	return cmd
}
