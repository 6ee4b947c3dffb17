package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"

	"github.com/talos-go/talos/internal/images"
)

func containersCmd(g *Global) *cobra.Command {
	var kubernetes bool

	cmd := &cobra.Command{
		Use:     "containers",
		Aliases: []string{"c"},
		Short:   "List containers",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &machineapi.ContainersRequest{Namespace: "system", Driver: common.ContainerDriver_CONTAINERD}
			if kubernetes {
				req = &machineapi.ContainersRequest{Namespace: "k8s.io", Driver: common.ContainerDriver_CRI}
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.MachineClient.Containers(s.ctx(ctx), req, callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.ContainersResponse) error {
					return renderContainers(cmd.OutOrStdout(), resp, defaultNode())
				})
			})
		},
	}

	cmd.Flags().BoolVarP(&kubernetes, "kubernetes", "k", false, "use the k8s.io containerd namespace")

	return cmd
}

// renderContainers writes the containers table, upstream's columns.
func renderContainers(w io.Writer, resp *machineapi.ContainersResponse, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tID\tIMAGE\tPID\tSTATUS")

	for _, msg := range resp.GetMessages() {
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		for _, c := range msg.GetContainers() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", node, c.GetNamespace(), podTreeID(c.GetId(), c.GetPodId()), c.GetImage(), c.GetPid(), c.GetStatus())
		}
	}

	return tw.Flush()
}

// podTreeID is how upstream's tables show a pod's container: under its pod's sandbox, as
// "└─ <ID>" (a sandbox's ID is its pod's, and containers of no pod have none).
func podTreeID(id, podID string) string {
	if podID != "" && id != podID {
		return "└─ " + id
	}

	return id
}

func imageCmd(g *Global) *cobra.Command {
	var namespace string

	ns := func() (common.ContainerdNamespace, error) {
		switch namespace {
		case "cri", "k8s.io":
			return common.ContainerdNamespace_NS_CRI, nil
		case "system":
			return common.ContainerdNamespace_NS_SYSTEM, nil
		}

		return 0, fmt.Errorf("--namespace %q: use cri or system", namespace)
	}

	cmd := &cobra.Command{Use: "image", Aliases: []string{"images"}, Short: "Manage container images"}
	cmd.PersistentFlags().StringVar(&namespace, "namespace", "cri", "namespace to use: system (Talos services) or cri (Kubernetes)")

	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Aliases: []string{"l", "ls"},
		Short:   "List the images of the node's containerd",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := ns()
			if err != nil {
				return err
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				return listImages(ctx, cmd, s, n)
			})
		},
	}, &cobra.Command{
		Use:     "pull <image>",
		Aliases: []string{"p"},
		Short:   "Pull an image into the node's containerd",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := ns()
			if err != nil {
				return err
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				resp, err := s.c.MachineClient.ImagePull(s.ctx(ctx), &machineapi.ImagePullRequest{Namespace: n, Reference: args[0]})

				return renderReply(cmd, resp, err, func(*machineapi.ImagePullResponse) error { return nil })
			})
		},
	}, &cobra.Command{
		Use:   "default",
		Short: "List the default images used by Talos",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The list is this build's, as upstream's is: the node image carries these images.
			for _, ref := range images.DefaultList() {
				fmt.Fprintln(cmd.OutOrStdout(), ref)
			}

			return nil
		},
	})

	cmd.AddCommand(imageCacheCreateCmd())

	return cmd
}

// listImages writes the images of each node's containerd in namespace n, as a table.
func listImages(ctx context.Context, cmd *cobra.Command, s *session, n common.ContainerdNamespace) error {
	stream, err := s.c.MachineClient.ImageList(s.ctx(ctx), &machineapi.ImageListRequest{Namespace: n})
	if err != nil {
		return nodeErrors(cmd.ErrOrStderr(), err)
	}

	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIMAGE\tDIGEST\tSIZE\tCREATED")

	failed := false

	for {
		img, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return nodeErrors(cmd.ErrOrStderr(), err)
		}

		// A node that failed (no containerd, say) sends its error in place of images.
		if e := img.GetMetadata().GetError(); e != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %s\n", img.GetMetadata().GetHostname(), e)

			failed = true

			continue
		}

		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.GetMetadata().GetHostname(), img.GetName(), img.GetDigest(),
			humanize.Bytes(uint64(img.GetSize())), img.GetCreatedAt().AsTime().Format("2006-01-02T15:04:05Z07:00"))
	}

	if err = tw.Flush(); err == nil && failed {
		err = errSilent
	}

	return err
}
