package talosctl

import (
	"context"
	"fmt"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
)

// metaCmd writes and deletes keys of the nodes' META store (upstream's META partition tags).
func metaCmd(g *Global) *cobra.Command {
	var insecure bool

	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Write and delete keys in the META partition",
	}

	cmd.PersistentFlags().BoolVarP(&insecure, "insecure", "i", false, "write|delete meta using the insecure (encrypted with no auth) maintenance service")

	// run calls fn on every node, through apid or, with -i, each node's maintenance API.
	run := func(cmd *cobra.Command, what string, fn func(ctx context.Context, c *client.Client) error) error {
		each := func(ctx context.Context, s *session) error {
			return eachNode(ctx, cmd.ErrOrStderr(), s, what, func(ctx context.Context, _ string) error { return fn(ctx, s.c) })
		}

		if insecure {
			return getInsecure(cmd, g.Nodes, each)
		}

		return g.run(cmd, each)
	}

	cmd.AddCommand(&cobra.Command{
		Use:   "write key value",
		Short: "Write a key-value pair to the META partition.",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseMetaKey(args[0])
			if err != nil {
				return err
			}

			return run(cmd, "meta write "+args[0], func(ctx context.Context, c *client.Client) error {
				return c.MetaWrite(ctx, key, []byte(args[1]))
			})
		},
	}, &cobra.Command{
		Use:   "delete key",
		Short: "Delete a key from the META partition.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseMetaKey(args[0])
			if err != nil {
				return err
			}

			return run(cmd, "meta delete "+args[0], func(ctx context.Context, c *client.Client) error {
				return c.MetaDelete(ctx, key)
			})
		},
	})

	return cmd
}

// parseMetaKey reads a key as upstream does: a number from 0 to 255, decimal or 0x hex.
func parseMetaKey(s string) (uint8, error) {
	key, err := strconv.ParseUint(s, 0, 8)
	if err != nil {
		return 0, fmt.Errorf("META key %q: want a number from 0 to 255, e.g. 0x0c", s)
	}

	return uint8(key), nil
}
