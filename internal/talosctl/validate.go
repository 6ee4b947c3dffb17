package talosctl

import (
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/spf13/cobra"

	"github.com/talos-go/talos/internal/configsupport"
)

// runtimeMode is the platform mode a config is validated for.
type runtimeMode string

func (m runtimeMode) String() string        { return string(m) }
func (m runtimeMode) RequiresInstall() bool { return m == "metal" }
func (m runtimeMode) InContainer() bool     { return m == "container" }

func parseMode(s string) (validation.RuntimeMode, error) {
	switch s {
	case "cloud", "container", "metal":
		return runtimeMode(s), nil
	default:
		return nil, fmt.Errorf("unknown mode %q: use cloud, container or metal", s)
	}
}

func validateCmd() *cobra.Command {
	var (
		file, mode string
		strict     bool
	)

	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Validate config",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return validateFile(cmd.OutOrStdout(), cmd.ErrOrStderr(), file, mode, strict)
		},
	}

	cmd.Flags().StringVarP(&file, "config", "c", "", "the path of the config file")
	cmd.Flags().StringVarP(&mode, "mode", "m", "", "the mode to validate the config for (valid values are metal, cloud, and container)")
	cmd.Flags().BoolVar(&strict, "strict", false, "treat validation warnings as errors")
	cmd.MarkFlagRequired("config")
	cmd.MarkFlagRequired("mode")

	return cmd
}

// validateFile loads a machine config and validates it for mode; warnings are printed, and
// with strict they fail the validation.
func validateFile(w, stderr io.Writer, file, mode string, strict bool) error {
	m, err := parseMode(mode)
	if err != nil {
		return err
	}

	cfg, err := configloader.NewFromFile(file)
	if err != nil {
		return fmt.Errorf("loading %s: %w", file, err)
	}

	var opts []validation.Option
	if strict {
		opts = append(opts, validation.WithStrict())
	}

	warnings, err := cfg.Validate(m, opts...)
	for _, warning := range warnings {
		fmt.Fprintf(stderr, "WARNING: %s\n", warning)
	}

	if err != nil {
		return fmt.Errorf("%s is not valid for %s mode: %w", file, mode, err)
	}

	// What our nodes refuse (docs/config-coverage.md): a metal node is the metal mode's; a
	// container-mode config may run on the process or the container provisioner, so only what
	// both refuse is named.
	node := configsupport.Node("")
	if mode == "metal" {
		node = configsupport.Metal
	}

	if err = configsupport.Check(cfg, node); err != nil {
		return fmt.Errorf("%s sets what this node refuses (docs/config-coverage.md): %w", file, err)
	}

	fmt.Fprintf(w, "%s is valid for %s mode\n", file, mode)

	return nil
}
