package talosctl

import (
	"context"
	"fmt"
	"os"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

// bootstrapCmd is `talosctl bootstrap`: start the etcd cluster on one control plane, optionally
// recovering it from a snapshot (uploaded first with EtcdRecover).
func bootstrapCmd(g *Global) *cobra.Command {
	var recoverFrom string

	var skipHash bool

	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Bootstrap the etcd cluster on the specified node.",
		Long: `When Talos runs as a control plane it waits for this call on exactly one control plane to start
the etcd cluster; the other control planes then join it. A second call, or a call on a node that
already holds etcd data, is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "bootstrap")
				if err != nil {
					return err
				}

				if recoverFrom != "" {
					f, err := os.Open(recoverFrom)
					if err != nil {
						return fmt.Errorf("opening the snapshot: %w", err)
					}

					defer f.Close()

					if _, err := s.c.EtcdRecover(ctx, f); err != nil {
						return fmt.Errorf("uploading the snapshot %s: %w%s", recoverFrom, err, hint(err))
					}
				}

				err = s.c.Bootstrap(ctx, &machineapi.BootstrapRequest{
					RecoverEtcd:          recoverFrom != "",
					RecoverSkipHashCheck: skipHash,
				})
				if err != nil {
					return fmt.Errorf("bootstrap: %w%s", err, hint(err))
				}

				return nil
			})
		},
	}

	cmd.Flags().StringVar(&recoverFrom, "recover-from", "", "recover etcd state from the snapshot")
	cmd.Flags().BoolVar(&skipHash, "recover-skip-hash-check", false, "skip integrity check when recovering etcd (use when recovering from a data directory copy)")

	return cmd
}
