package talosctl

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func configInfoCmd(g *Global) *cobra.Command {
	var format string

	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show information about the current context",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" && format != "yaml" {
				return fmt.Errorf("--output %q: use text, json or yaml", format)
			}

			cfg, path, err := loadConfig(g.Talosconfig, false)
			if err != nil {
				return err
			}

			name, c, err := currentContext(cfg, g.Context, path)
			if err != nil {
				return err
			}

			if format == "text" {
				return renderContextInfo(cmd.OutOrStdout(), name, c, time.Now())
			}

			return renderContextInfoData(cmd.OutOrStdout(), format, name, c, time.Now())
		},
	}

	cmd.Flags().StringVarP(&format, "output", "o", "text", "output format (json|yaml|text). Default text.")

	return cmd
}

// contextInfo is `config info -o json|yaml` (upstream's field names).
type contextInfo struct {
	Context      string   `json:"context" yaml:"context"`
	Nodes        []string `json:"nodes" yaml:"nodes"`
	Endpoints    []string `json:"endpoints" yaml:"endpoints"`
	Roles        []string `json:"roles" yaml:"roles"`
	CertTTL      string   `json:"certTTL" yaml:"certTTL"`
	CertNotAfter string   `json:"certNotAfter" yaml:"certNotAfter"`
}

func renderContextInfoData(w io.Writer, format, name string, c *clientconfig.Context, now time.Time) error {
	info := contextInfo{Context: name, Nodes: c.Nodes, Endpoints: c.Endpoints}

	if c.Crt != "" {
		crt, err := parseCert(c.Crt)
		if err != nil {
			return fmt.Errorf("reading the client certificate of context %q: %w (regenerate it with `talosctl config new`)", name, err)
		}

		info.Roles = crt.Subject.Organization
		info.CertTTL = crt.NotAfter.Sub(now).Round(time.Second).String()
		info.CertNotAfter = crt.NotAfter.UTC().Format(time.RFC3339)
	}

	if format == "yaml" {
		return yaml.NewEncoder(w).Encode(&info)
	}

	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")

	return enc.Encode(&info)
}
