package talosctl

import (
	"fmt"

	"github.com/spf13/cobra"
)

func completionCmd() *cobra.Command {
	return &cobra.Command{
		Use:       "completion SHELL",
		Short:     "Output shell completion code for the specified shell (bash, fish, zsh or powershell)",
		ValidArgs: []string{"bash", "fish", "zsh", "powershell"},
		Args:      cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, w := cmd.Root(), cmd.OutOrStdout()

			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "fish":
				return root.GenFishCompletion(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(w)
			default:
				return fmt.Errorf("unsupported shell %q: use bash, fish, zsh or powershell", args[0])
			}
		},
	}
}
