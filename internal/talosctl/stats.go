package talosctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

// statsCmd shows the memory and CPU of the node's containers (system, or with -k Kubernetes').
func statsCmd(g *Global) *cobra.Command {
	var kubernetes bool

	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Get container stats",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &machineapi.StatsRequest{Namespace: "system", Driver: common.ContainerDriver_CONTAINERD}
			if kubernetes {
				req = &machineapi.StatsRequest{Namespace: "k8s.io", Driver: common.ContainerDriver_CRI}
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.MachineClient.Stats(s.ctx(ctx), req, callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.StatsResponse) error {
					return renderStats(cmd.OutOrStdout(), resp, defaultNode())
				})
			})
		},
	}

	cmd.Flags().BoolVarP(&kubernetes, "kubernetes", "k", false, "use the k8s.io containerd namespace")

	return cmd
}

// renderStats writes upstream's table: memory in MB, CPU as nanoseconds of CPU time.
func renderStats(w io.Writer, resp *machineapi.StatsResponse, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tID\tMEMORY(MB)\tCPU")

	for _, msg := range resp.GetMessages() {
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		for _, s := range msg.GetStats() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%d\n", node, s.GetNamespace(), podTreeID(s.GetId(), s.GetPodId()), float64(s.GetMemoryUsage())*1e-6, s.GetCpuUsage())
		}
	}

	return tw.Flush()
}
