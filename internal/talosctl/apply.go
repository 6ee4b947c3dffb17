package talosctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/talos-go/talos/internal/configpatch"
)

// applyModes maps --mode values to the API's apply modes.
var applyModes = map[string]machineapi.ApplyConfigurationRequest_Mode{
	"auto":      machineapi.ApplyConfigurationRequest_AUTO,
	"no-reboot": machineapi.ApplyConfigurationRequest_NO_REBOOT,
	"reboot":    machineapi.ApplyConfigurationRequest_REBOOT,
	"staged":    machineapi.ApplyConfigurationRequest_STAGED,
	"try":       machineapi.ApplyConfigurationRequest_TRY,
}

type applyFlags struct {
	mode    string
	dryRun  bool
	timeout time.Duration
}

func (f *applyFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.mode, "mode", "m", "auto", "apply config mode: auto, no-reboot, reboot, staged, try")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "check how the config change will be applied in dry-run mode")
	cmd.Flags().DurationVar(&f.timeout, "timeout", time.Minute, "the config will be rolled back after the specified timeout (if try mode is selected)")
}

func (f *applyFlags) request(data []byte) (*machineapi.ApplyConfigurationRequest, error) {
	mode, ok := applyModes[f.mode]
	if !ok {
		return nil, fmt.Errorf("unknown --mode %q: use auto, no-reboot, reboot, staged or try", f.mode)
	}

	return &machineapi.ApplyConfigurationRequest{
		Data:           data,
		Mode:           mode,
		DryRun:         f.dryRun,
		TryModeTimeout: durationpb.New(f.timeout),
	}, nil
}

func applyConfigCmd(g *Global) *cobra.Command {
	var (
		file         string
		insecure     bool
		patches      []string
		fingerprints []string
		af           applyFlags
	)

	cmd := &cobra.Command{
		Use:     "apply-config",
		Aliases: []string{"apply"},
		Short:   "Apply a new configuration to a node",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("no config file: pass it with -f")
			}

			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("reading %s: %w", file, err)
			}

			if len(patches) > 0 {
				if data, err = patchBytes(data, patches); err != nil {
					return err
				}
			}

			req, err := af.request(data)
			if err != nil {
				return err
			}

			if insecure {
				return applyInsecure(cmd, g, req, fingerprints)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.ApplyConfiguration(s.ctx(ctx), req, callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.ApplyConfigurationResponse) error {
					renderApply(cmd.OutOrStdout(), cmd.ErrOrStderr(), resp, defaultNode())

					return nil
				})
			})
		},
	}

	cmd.Flags().StringVarP(&file, "file", "f", "", "the filename of the updated configuration")
	cmd.Flags().BoolVarP(&insecure, "insecure", "i", false, "apply the config using the insecure (encrypted with no auth) maintenance service")
	cmd.Flags().StringSliceVar(&fingerprints, "cert-fingerprint", nil, "list of server certificate fingeprints to accept (defaults to no check)")
	cmd.Flags().StringArrayVarP(&patches, "config-patch", "p", nil, "the list of config patches to apply to the local config file before sending it to the node")
	af.register(cmd)

	return cmd
}

// applyInsecure sends the config to each node's maintenance API in turn.
func applyInsecure(cmd *cobra.Command, g *Global, req *machineapi.ApplyConfigurationRequest, fingerprintArgs []string) error {
	if len(g.Nodes) == 0 {
		return fmt.Errorf("--insecure needs the node addresses: pass them with -n")
	}

	fingerprints := make([]x509.Fingerprint, 0, len(fingerprintArgs))

	for _, arg := range fingerprintArgs {
		fp, err := x509.ParseFingerprint(arg)
		if err != nil {
			return fmt.Errorf("--cert-fingerprint %q: %w", arg, err)
		}

		fingerprints = append(fingerprints, fp)
	}

	failed := false

	for _, node := range g.Nodes {
		err := withPinnedMaintenanceClient(cmd.Context(), node, fingerprints, func(ctx context.Context, c *client.Client) error {
			resp, err := c.ApplyConfiguration(ctx, req)
			if err != nil {
				return err
			}

			renderApply(cmd.OutOrStdout(), cmd.ErrOrStderr(), resp, node)

			return nil
		})
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: applying configuration: %v%s\n", node, err, hint(err))

			failed = true
		}
	}

	if failed {
		return errSilent
	}

	return nil
}

// renderApply prints the warnings (stderr) and the mode details of every node.
func renderApply(w, stderr io.Writer, resp *machineapi.ApplyConfigurationResponse, defaultNode string) {
	msgs := resp.GetMessages()

	for _, m := range msgs {
		prefix := ""
		if len(msgs) > 1 {
			prefix = nodeOf(m.GetMetadata().GetHostname(), defaultNode) + ": "
		}

		for _, warning := range m.GetWarnings() {
			fmt.Fprintf(stderr, "WARNING: %s%s\n", prefix, warning)
		}

		if m.GetModeDetails() != "" {
			fmt.Fprintf(w, "%s%s\n", prefix, m.GetModeDetails())
		}
	}
}

// patchBytes applies config patches (inline YAML/JSON or @file) to a machine config.
func patchBytes(data []byte, patchArgs []string) ([]byte, error) {
	patches, err := configpatcher.LoadPatches(patchArgs)
	if err != nil {
		return nil, fmt.Errorf("loading patches: %w (a patch is inline YAML/JSON or @file)", err)
	}

	out, err := configpatch.Apply(configpatcher.WithBytes(data), patches)
	if err != nil {
		return nil, fmt.Errorf("applying patches: %w", err)
	}

	return out.Bytes()
}

func patchCmd(g *Global) *cobra.Command {
	var (
		patches   []string
		patchFile string
		namespace string
		af        applyFlags
	)

	cmd := &cobra.Command{
		Use:   "patch <type> [<id>]",
		Short: "Update field(s) of a resource using a JSON patch or a strategic merge patch (only machineconfig)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := machineConfigTarget(args[0], namespace, "patched"); err != nil {
				return err
			}

			if patchFile != "" {
				patches = append(patches, "@"+patchFile)
			}

			if len(patches) == 0 {
				return fmt.Errorf("no patch: pass one with --patch (inline or @file) or --patch-file")
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				failed := false

				for _, node := range s.nodes {
					if err := patchNode(cmd, s.nodeCtx(ctx, node), s.c, node, patches, &af); err != nil {
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

	cmd.Flags().StringArrayVarP(&patches, "patch", "p", nil, "the patch to be applied to the resource (inline YAML/JSON or @file)")
	cmd.Flags().StringVar(&patchFile, "patch-file", "", "a file containing a patch to be applied to the resource")
	cmd.Flags().StringVar(&namespace, "namespace", "", "resource namespace (default is to use default namespace per resource)")
	af.register(cmd)

	return cmd
}

func patchNode(cmd *cobra.Command, ctx context.Context, c *client.Client, node string, patchArgs []string, af *applyFlags) error {
	mc, err := safe.StateGet[*config.MachineConfig](ctx, c.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
	if err != nil {
		return fmt.Errorf("reading the machine config: %w", err)
	}

	patches, err := configpatcher.LoadPatches(patchArgs)
	if err != nil {
		return fmt.Errorf("loading patches: %w (a patch is inline YAML/JSON or @file)", err)
	}

	out, err := configpatch.Apply(configpatcher.WithConfig(mc.Provider()), patches)
	if err != nil {
		return fmt.Errorf("applying patches: %w", err)
	}

	data, err := out.Bytes()
	if err != nil {
		return fmt.Errorf("encoding the patched config: %w", err)
	}

	req, err := af.request(data)
	if err != nil {
		return err
	}

	resp, err := c.ApplyConfiguration(ctx, req)
	if err != nil {
		return fmt.Errorf("applying the patched config: %w", err)
	}

	fmt.Fprintf(cmd.OutOrStdout(), "patched %s/%s at the node %s\n", config.MachineConfigType, config.ActiveID, node)
	renderApply(cmd.OutOrStdout(), cmd.ErrOrStderr(), resp, node)

	return nil
}

// machineConfigTarget accepts the resource edit and patch work on: the machine config, in its
// namespace (upstream's commands take any type and refuse all but the machine config too).
func machineConfigTarget(typ, namespace, verb string) error {
	if typ != "machineconfig" && typ != "mc" && typ != "machineconfigs" && typ != config.MachineConfigType {
		return fmt.Errorf("%s is not supported: only machineconfig can be %s", typ, verb)
	}

	if namespace != "" && namespace != config.NamespaceName {
		return fmt.Errorf("--namespace %q: the machine config is in namespace %s", namespace, config.NamespaceName)
	}

	return nil
}
