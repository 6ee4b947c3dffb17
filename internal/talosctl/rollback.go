package talosctl

import (
	"context"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

func rollbackCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback",
		Short: "Rollback a node to the previous installation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				resp, err := s.c.MachineClient.Rollback(s.ctx(ctx), &machineapi.RollbackRequest{})

				return renderReply(cmd, resp, err, func(*machineapi.RollbackResponse) error { return nil })
			})
		},
	}
}
