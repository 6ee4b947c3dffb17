package talosctl

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/spf13/cobra"
)

// restartCmd restarts a container (a system service's in the system namespace, or with -k a
// Kubernetes one through CRI) through the node's Restart method.
func restartCmd(g *Global) *cobra.Command {
	var kubernetes bool

	cmd := &cobra.Command{
		Use:   "restart <id>",
		Short: "Restart a process",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			namespace, driver := constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD
			if kubernetes {
				namespace, driver = constants.K8sContainerdNamespace, common.ContainerDriver_CRI
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				return eachNode(ctx, cmd.ErrOrStderr(), s, "restart "+args[0], func(ctx context.Context, _ string) error {
					return s.c.Restart(ctx, namespace, driver, args[0])
				})
			})
		},
	}

	cmd.Flags().BoolVarP(&kubernetes, "kubernetes", "k", false, "use the k8s.io containerd namespace")

	return cmd
}
