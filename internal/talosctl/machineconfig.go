package talosctl

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// machineconfigCmd holds the offline machine config commands (alias mc).
func machineconfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "machineconfig",
		Aliases: []string{"mc"},
		Short:   "Machine config related commands",
	}

	var force bool

	gen := genConfigCmd(&force)
	gen.Use = "gen <cluster name> <cluster endpoint>"
	gen.Flags().BoolVarP(&force, "force", "f", false, "will overwrite existing files")

	cmd.AddCommand(gen, machineconfigPatchCmd())

	return cmd
}

func machineconfigPatchCmd() *cobra.Command {
	var (
		patches []string
		output  string
	)

	cmd := &cobra.Command{
		Use:   "patch <machineconfig-file>",
		Short: "Patch a machine config",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(patches) == 0 {
				return fmt.Errorf("no patches: pass them with -p (inline YAML/JSON, or @file)")
			}

			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("reading machine config: %w", err)
			}

			out, err := patchBytes(data, patches)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}

			if output == "" {
				_, err = cmd.OutOrStdout().Write(out)

				return err
			}

			if err = os.WriteFile(output, out, 0o600); err != nil {
				return fmt.Errorf("writing %s: %w", output, err)
			}

			return nil
		},
	}

	cmd.Flags().StringArrayVarP(&patches, "patch", "p", nil, "patch generated machineconfigs (applied to all node types), use @file to read a patch from file")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output destination. if not specified, output will be printed to stdout")

	return cmd
}
