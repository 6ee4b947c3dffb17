package talosctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/spf13/cobra"
)

func wipeCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wipe",
		Short: "Wipe block device or volumes",
	}

	cmd.AddCommand(wipeDiskCmd(g))

	return cmd
}

// wipeDiskCmd asks each node's StorageService to wipe the named block devices.
func wipeDiskCmd(g *Global) *cobra.Command {
	var (
		method        string
		dropPartition bool
		insecure      bool
	)

	cmd := &cobra.Command{
		Use:   "disk <device names>...",
		Short: "Wipe a block device (disk or partition) which is not used as a volume",
		Long: `Wipe a block device (disk or partition) which is not used as a volume.

Use device names as arguments, for example: vda or sda5.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ok := storage.BlockDeviceWipeDescriptor_Method_value[method]
			if !ok {
				return fmt.Errorf("--method %q: use FAST or ZEROES", method)
			}

			req := &storage.BlockDeviceWipeRequest{}
			for _, dev := range args {
				req.Devices = append(req.Devices, &storage.BlockDeviceWipeDescriptor{
					Device:        strings.TrimPrefix(dev, "/dev/"),
					Method:        storage.BlockDeviceWipeDescriptor_Method(m),
					DropPartition: dropPartition,
				})
			}

			wipe := func(ctx context.Context, s *session) error {
				return eachNode(ctx, cmd.ErrOrStderr(), s, "wipe disk (StorageService.BlockDeviceWipe)", func(ctx context.Context, _ string) error {
					return s.c.BlockDeviceWipe(ctx, req)
				})
			}

			if insecure {
				return getInsecure(cmd, g.Nodes, wipe)
			}

			return g.run(cmd, wipe)
		},
	}

	cmd.Flags().StringVar(&method, "method", "FAST", "wipe method to use [FAST ZEROES]")
	cmd.Flags().BoolVar(&dropPartition, "drop-partition", false, "drop partition after wipe (if applicable)")
	cmd.Flags().BoolVarP(&insecure, "insecure", "i", false, "wipe using the insecure (encrypted with no auth) maintenance service")

	return cmd
}
