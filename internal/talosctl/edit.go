package talosctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/spf13/cobra"
)

// editHeader opens the file handed to the editor; it is stripped before the config is sent.
const editHeader = "# Edit the machine config of %s. Lines starting with '#' at the top are ignored;\n" +
	"# an unchanged file applies nothing. Save and quit to apply (mode %s).\n"

func editCmd(g *Global) *cobra.Command {
	var (
		af        applyFlags
		namespace string
	)

	cmd := &cobra.Command{
		Use:   "edit <type> [<id>]",
		Short: "Edit a resource from the default editor (only machineconfig)",
		Long: `Opens the node's machine config in $TALOS_EDITOR, $EDITOR or $VISUAL (vi when none is
set) and applies the saved result with --mode. With several nodes, each is edited in turn.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := machineConfigTarget(args[0], namespace, "edited"); err != nil {
				return err
			}

			if _, err := af.request(nil); err != nil {
				return err
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				failed := false

				for _, node := range s.nodes {
					if err := editNode(cmd, s.nodeCtx(ctx, node), s, node, &af); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %v%s\n", node, err, hint(err))

						failed = true
					}
				}

				if failed {
					return errSilent
				}

				return nil
			})
		},
	}

	af.register(cmd)
	cmd.Flags().StringVar(&namespace, "namespace", "", "resource namespace (default is to use default namespace per resource)")

	return cmd
}

func editNode(cmd *cobra.Command, ctx context.Context, s *session, node string, af *applyFlags) error {
	mc, err := safe.StateGet[*config.MachineConfig](ctx, s.c.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
	if err != nil {
		return fmt.Errorf("reading the machine config: %w", err)
	}

	current, err := mc.Provider().Bytes()
	if err != nil {
		return fmt.Errorf("encoding the machine config: %w", err)
	}

	dir, err := os.MkdirTemp("", "talosctl-edit-")
	if err != nil {
		return err
	}

	// The file holds secrets: owner-only, and removed unless it is needed to retry.
	path := filepath.Join(dir, "machineconfig.yaml")
	keep := false

	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()

	header := fmt.Sprintf(editHeader, node, af.mode)
	if err = os.WriteFile(path, append([]byte(header), current...), 0o600); err != nil {
		return err
	}

	if err = runEditor(cmd, path); err != nil {
		return err
	}

	edited, err := os.ReadFile(path)
	if err != nil {
		return err
	}

	edited = stripHeader(edited)

	if bytes.Equal(bytes.TrimSpace(edited), bytes.TrimSpace(current)) {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: Apply was skipped: no changes detected.\n", node)

		return nil
	}

	req, err := af.request(edited)
	if err != nil {
		return err
	}

	resp, err := s.c.ApplyConfiguration(ctx, req)
	if err != nil {
		keep = true

		return fmt.Errorf("applying the edited config: %w (nothing changed on the node; the edit is kept in %s: fix it and run `talosctl -n %s apply-config -f %s`)", err, path, node, path)
	}

	renderApply(cmd.OutOrStdout(), cmd.ErrOrStderr(), resp, node)

	return nil
}

// runEditor opens path in the user's editor, attached to the terminal.
func runEditor(cmd *cobra.Command, path string) error {
	editor := "vi"

	for _, env := range []string{"TALOS_EDITOR", "EDITOR", "VISUAL"} {
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			editor = v

			break
		}
	}

	fields := strings.Fields(editor)

	c := exec.Command(fields[0], append(fields[1:], path)...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()

	if err := c.Run(); err != nil {
		return fmt.Errorf("editor %q: %w (set TALOS_EDITOR or EDITOR to the editor to use)", editor, err)
	}

	return nil
}

// stripHeader drops the comment lines at the top of the edited file.
func stripHeader(b []byte) []byte {
	for len(b) > 0 && b[0] == '#' {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}

		b = b[i+1:]
	}

	return b
}
