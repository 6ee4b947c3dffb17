package talosctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

// etcdDowngradeCmd is `etcd downgrade validate|enable|cancel`: etcd's storage downgrade, run on
// the nodes' etcd members; each node answers with the cluster version.
func etcdDowngradeCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "downgrade",
		Short: "Manage etcd storage downgrade",
	}

	// action runs one call per node and prints "NODE MESSAGE" rows.
	action := func(cmd *cobra.Command, what string, call func(context.Context, *session) (string, error)) error {
		return g.run(cmd, func(ctx context.Context, s *session) error {
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 3, ' ', 0)
			fmt.Fprintln(w, "NODE\tMESSAGE")

			err := eachNode(ctx, cmd.ErrOrStderr(), s, "etcd downgrade "+what, func(ctx context.Context, node string) error {
				version, err := call(ctx, s)
				if err != nil {
					return err
				}

				return downgradeRow(w, node, what, version)
			})

			if ferr := w.Flush(); ferr != nil {
				return ferr
			}

			return err
		})
	}

	cmd.AddCommand(&cobra.Command{
		Use:   "validate <version>",
		Short: "Validate if the etcd storage system can be downgraded to the specified version.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return action(cmd, "validate", func(ctx context.Context, s *session) (string, error) {
				r, err := s.c.EtcdDowngradeValidate(ctx, &machineapi.EtcdDowngradeValidateRequest{Version: args[0]})

				return firstClusterVersion(r.GetMessages(), err)
			})
		},
	}, &cobra.Command{
		Use:   "enable <version>",
		Short: "Enable etcd storage system downgrade to the specified version.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return action(cmd, "enable", func(ctx context.Context, s *session) (string, error) {
				r, err := s.c.EtcdDowngradeEnable(ctx, &machineapi.EtcdDowngradeEnableRequest{Version: args[0]})

				return firstClusterVersion(r.GetMessages(), err)
			})
		},
	}, &cobra.Command{
		Use:   "cancel",
		Short: "Cancel etcd storage system downgrade.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return action(cmd, "cancel", func(ctx context.Context, s *session) (string, error) {
				r, err := s.c.EtcdDowngradeCancel(ctx)

				return firstClusterVersion(r.GetMessages(), err)
			})
		},
	})

	return cmd
}

// clusterDowngradeMessage is any of the three downgrade replies' messages.
type clusterDowngradeMessage interface {
	GetClusterDowngrade() *machineapi.EtcdClusterDowngrade
}

func firstClusterVersion[M clusterDowngradeMessage](msgs []M, err error) (string, error) {
	if err != nil {
		return "", err
	}

	if len(msgs) == 0 {
		return "", fmt.Errorf("the node sent no reply")
	}

	return msgs[0].GetClusterDowngrade().GetClusterVersion(), nil
}

func downgradeRow(w io.Writer, node, what, version string) error {
	_, err := fmt.Fprintf(w, "%s\tdowngrade %s success, cluster version %s\n", node, what, version)

	return err
}
