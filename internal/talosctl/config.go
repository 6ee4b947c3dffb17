package talosctl

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
)

func configCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage the client configuration file (talosconfig)",
	}

	cmd.AddCommand(
		configContextsCmd(g),
		configContextCmd(g),
		configAddCmd(g),
		configMergeCmd(g),
		configEndpointCmd(g),
		configNodeCmd(g),
		configInfoCmd(g),
		configNewCmd(g),
		configRemoveCmd(g),
	)

	return cmd
}

func configContextsCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "contexts",
		Aliases: []string{"get-contexts"},
		Short:   "List defined contexts",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := loadConfig(g.Talosconfig, false)
			if err != nil {
				return err
			}

			return renderContexts(cmd.OutOrStdout(), cfg)
		},
	}
}

// renderContexts writes the table of contexts, the current one marked with '*'.
func renderContexts(w io.Writer, cfg *clientconfig.Config) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tNAME\tENDPOINTS\tNODES")

	names := make([]string, 0, len(cfg.Contexts))
	for name := range cfg.Contexts {
		names = append(names, name)
	}

	slices.Sort(names)

	for _, name := range names {
		cur := ""
		if name == cfg.Context {
			cur = "*"
		}

		c := cfg.Contexts[name]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cur, name, strings.Join(c.Endpoints, ","), strings.Join(c.Nodes, ","))
	}

	return tw.Flush()
}

func configContextCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "context <context>",
		Aliases: []string{"use-context"},
		Short:   "Set the current context",
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, path, err := loadConfig(g.Talosconfig, false)
			if err != nil {
				return err
			}

			if _, ok := cfg.Contexts[args[0]]; !ok {
				return fmt.Errorf("context %q is not in talosconfig %s: list contexts with `talosctl config contexts`", args[0], path)
			}

			cfg.Context = args[0]

			return saveConfig(cfg, path)
		},
	}
}

func configAddCmd(g *Global) *cobra.Command {
	var ca, crt, key string

	cmd := &cobra.Command{
		Use:   "add <context>",
		Short: "Add a new context",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, path, err := loadConfig(g.Talosconfig, true)
			if err != nil {
				return err
			}

			if _, ok := cfg.Contexts[args[0]]; ok {
				return fmt.Errorf("context %q already exists in %s: pick another name", args[0], path)
			}

			c := &clientconfig.Context{}

			for _, f := range []struct {
				file string
				dst  *string
			}{{ca, &c.CA}, {crt, &c.Crt}, {key, &c.Key}} {
				if f.file == "" {
					continue
				}

				data, err := os.ReadFile(f.file)
				if err != nil {
					return fmt.Errorf("reading %s: %w", f.file, err)
				}

				*f.dst = base64.StdEncoding.EncodeToString(data)
			}

			cfg.Contexts[args[0]] = c
			if cfg.Context == "" {
				cfg.Context = args[0]
			}

			return saveConfig(cfg, path)
		},
	}

	cmd.Flags().StringVar(&ca, "ca", "", "the path to the CA certificate")
	cmd.Flags().StringVar(&crt, "crt", "", "the path to the certificate")
	cmd.Flags().StringVar(&key, "key", "", "the path to the key")

	return cmd
}

func configMergeCmd(g *Global) *cobra.Command {
	var force bool

	cmd := &cobra.Command{
		Use:   "merge <from>",
		Short: "Merge additional contexts from another client configuration file",
		Long: "Contexts with the same name are renamed while merging (an index suffix is added), " +
			"unless --force is given, which replaces them.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("reading %s: %w", args[0], err)
			}

			other, err := clientconfig.FromBytes(from)
			if err != nil {
				return fmt.Errorf("parsing %s: %w", args[0], err)
			}

			cfg, path, err := loadConfig(g.Talosconfig, true)
			if err != nil {
				return err
			}

			for _, r := range mergeConfig(cfg, other, force) {
				fmt.Fprintf(cmd.OutOrStdout(), "renamed talosconfig context %s\n", r.String())
			}

			return saveConfig(cfg, path)
		},
	}

	cmd.Flags().BoolVarP(&force, "force", "f", false, "replace contexts that have the same name instead of renaming them")

	return cmd
}

// mergeConfig adds the contexts of other to cfg. A clashing name gets an index suffix
// (name-1, name-2, ...) unless force, which replaces the existing context. The current
// context becomes other's current context.
func mergeConfig(cfg, other *clientconfig.Config, force bool) []clientconfig.Rename {
	if !force {
		return cfg.Merge(other)
	}

	if cfg.Contexts == nil {
		cfg.Contexts = map[string]*clientconfig.Context{}
	}

	for name, c := range other.Contexts {
		cfg.Contexts[name] = c
	}

	if other.Context != "" {
		cfg.Context = other.Context
	}

	return nil
}

func configEndpointCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "endpoint <endpoint>...",
		Aliases: []string{"endpoints"},
		Short:   "Set the endpoints of the current context",
		RunE: func(_ *cobra.Command, args []string) error {
			return updateContext(g, func(c *clientconfig.Context) { c.Endpoints = splitArgs(args) })
		},
	}
}

func configNodeCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "node <endpoint>...",
		Aliases: []string{"nodes"},
		Short:   "Set the default nodes of the current context",
		RunE: func(_ *cobra.Command, args []string) error {
			return updateContext(g, func(c *clientconfig.Context) { c.Nodes = splitArgs(args) })
		},
	}
}

// splitArgs accepts both "a b" and "a,b".
func splitArgs(args []string) []string {
	var out []string

	for _, a := range args {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}

	return out
}

func updateContext(g *Global, change func(*clientconfig.Context)) error {
	cfg, path, err := loadConfig(g.Talosconfig, false)
	if err != nil {
		return err
	}

	_, c, err := currentContext(cfg, g.Context, path)
	if err != nil {
		return err
	}

	change(c)

	return saveConfig(cfg, path)
}

func saveConfig(cfg *clientconfig.Config, path string) error {
	if err := cfg.Save(path); err != nil {
		return fmt.Errorf("writing talosconfig %s: %w", path, err)
	}

	return nil
}

// renderContextInfo writes the context's endpoints, nodes, roles and certificate expiry.
func renderContextInfo(w io.Writer, name string, c *clientconfig.Context, now time.Time) error {
	orNotDefined := func(s []string) string {
		if len(s) == 0 {
			return "not defined"
		}

		return strings.Join(s, ", ")
	}

	roles, expires := "not defined", "not defined"

	if c.Crt != "" {
		crt, err := parseCert(c.Crt)
		if err != nil {
			return fmt.Errorf("reading the client certificate of context %q: %w (regenerate it with `talosctl config new`)", name, err)
		}

		if len(crt.Subject.Organization) > 0 {
			roles = strings.Join(crt.Subject.Organization, ", ")
		}

		expires = fmt.Sprintf("%s (%s)", humanize.RelTime(crt.NotAfter, now, "ago", "from now"), crt.NotAfter.Format("2006-01-02"))
	}

	fmt.Fprintf(w, "Current context:     %s\n", name)
	fmt.Fprintf(w, "Nodes:               %s\n", orNotDefined(c.Nodes))
	fmt.Fprintf(w, "Endpoints:           %s\n", orNotDefined(c.Endpoints))
	fmt.Fprintf(w, "Roles:               %s\n", roles)
	fmt.Fprintf(w, "Certificate expires: %s\n", expires)

	return nil
}

func parseCert(b64 string) (*x509.Certificate, error) {
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, err
	}

	block, _ := pem.Decode(der)
	if block == nil {
		return nil, fmt.Errorf("no PEM block in certificate")
	}

	return x509.ParseCertificate(block.Bytes)
}

func configNewCmd(g *Global) *cobra.Command {
	var (
		roles  []string
		crtTTL time.Duration
	)

	cmd := &cobra.Command{
		Use:   "new [<path>]",
		Short: "Generate a new client configuration file from the node (needs the os:admin role)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := "talosconfig"
			if len(args) == 1 {
				out = args[0]
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "config new")
				if err != nil {
					return err
				}

				resp, err := s.c.GenerateClientConfiguration(ctx, &machineapi.GenerateClientConfigurationRequest{
					Roles:  roles,
					CrtTtl: durationpb.New(crtTTL),
				})
				if err != nil {
					return fmt.Errorf("generating client configuration: %w%s", err, hint(err))
				}

				if len(resp.GetMessages()) != 1 {
					return fmt.Errorf("expected one reply, got %d", len(resp.GetMessages()))
				}

				if err = os.WriteFile(out, resp.GetMessages()[0].GetTalosconfig(), 0o600); err != nil {
					return fmt.Errorf("writing %s: %w", out, err)
				}

				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", out)

				return nil
			})
		},
	}

	cmd.Flags().StringSliceVar(&roles, "roles", []string{"os:admin"}, "roles")
	cmd.Flags().DurationVar(&crtTTL, "crt-ttl", 87600*time.Hour, "certificate TTL")

	return cmd
}
