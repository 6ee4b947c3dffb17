package talosctl

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

func configRemoveCmd(g *Global) *cobra.Command {
	var dryRun, noConfirm bool

	cmd := &cobra.Command{
		Use:   "remove <context>",
		Short: "Remove contexts",
		Long:  "The argument may be a glob pattern (talos-*). The current context is never removed: switch to another first.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, cfgPath, err := loadConfig(g.Talosconfig, false)
			if err != nil {
				return err
			}

			var matches []string

			for name := range cfg.Contexts {
				ok, err := path.Match(args[0], name)
				if err != nil {
					return fmt.Errorf("context pattern %q: %w", args[0], err)
				}

				if ok {
					matches = append(matches, name)
				}
			}

			if len(matches) == 0 {
				return fmt.Errorf("no context of %s matches %q: list them with `talosctl config contexts`", cfgPath, args[0])
			}

			slices.Sort(matches)

			stderr := cmd.ErrOrStderr()
			in := bufio.NewReader(cmd.InOrStdin())
			changed := false

			for _, name := range matches {
				if name == cfg.Context {
					fmt.Fprintf(stderr, "skipping removal of current context %q, please change it to another before removing\n", name)

					continue
				}

				if noConfirm {
					fmt.Fprintf(stderr, "removing context %q\n", name)
				} else if !confirm(in, stderr, fmt.Sprintf("remove context %q?", name)) {
					continue
				}

				delete(cfg.Contexts, name)

				changed = true
			}

			if dryRun || !changed {
				return nil
			}

			return saveConfig(cfg, cfgPath)
		},
	}

	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "dry run")
	cmd.Flags().BoolVarP(&noConfirm, "noconfirm", "y", false, "do not ask for confirmation")

	return cmd
}

// confirm asks a yes/no question; anything but y or yes (or the end of input) is no.
func confirm(in *bufio.Reader, out io.Writer, prompt string) bool {
	fmt.Fprintf(out, "%s [y/N]: ", prompt)

	line, _ := in.ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))

	return answer == "y" || answer == "yes"
}
