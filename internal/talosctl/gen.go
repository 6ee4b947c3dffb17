package talosctl

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/gendata"
	"github.com/siderolabs/talos/pkg/machinery/version"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/configpatch"
)

// defaultInstallerImage is the installer image for this client's version, as upstream names it.
func defaultInstallerImage() string {
	return fmt.Sprintf("%s/%s/installer:%s", gendata.ImagesRegistry, gendata.ImagesUsername, version.Tag)
}

func genCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Generate machine configurations, secrets and client configuration",
	}

	force := cmd.PersistentFlags().BoolP("force", "f", false, "will overwrite existing files")

	cmd.AddCommand(genConfigCmd(force), genSecretsCmd(force),
		genCACmd(force), genKeypairCmd(force), genKeyCmd(force), genCSRCmd(force), genCrtCmd(force),
		genSecurebootCmd(force))

	return cmd
}

// GenConfigOptions are the inputs of `talosctl gen config`.
type GenConfigOptions struct {
	ClusterName         string
	Endpoint            string
	OutputDir           string
	OutputTypes         []string
	WithSecrets         string
	KubernetesVersion   string
	TalosVersion        string
	InstallDisk         string
	InstallImage        string
	DNSDomain           string
	AdditionalSANs      []string
	Patches             []string
	PatchesControlPlane []string
	PatchesWorker       []string
	RegistryMirrors     []string
	ConfigVersion       string
	Persist             bool
	WithDiscovery       bool
	WithKubeSpan        bool
	WithDocs            bool
	WithExamples        bool
	Force               bool
}

func genConfigCmd(force *bool) *cobra.Command {
	o := GenConfigOptions{}

	cmd := &cobra.Command{
		Use:   "config <cluster name> <cluster endpoint>",
		Short: "Generate a set of configuration files for Talos cluster",
		Long: "The cluster endpoint is the URL of the Kubernetes API server, e.g. https://10.0.0.1:6443. " +
			"Writes controlplane.yaml, worker.yaml and talosconfig.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ClusterName, o.Endpoint, o.Force = args[0], args[1], *force

			return GenConfig(o, cmd.ErrOrStderr())
		},
	}

	f := cmd.Flags()
	f.StringVarP(&o.OutputDir, "output", "o", "", "destination directory for the generated files (default: current directory)")
	f.StringVar(&o.OutputDir, "output-dir", "", "destination directory for the generated files")
	f.StringSliceVarP(&o.OutputTypes, "output-types", "t", []string{"controlplane", "worker", "talosconfig"}, "types of outputs to be generated: controlplane, worker, talosconfig")
	f.StringVar(&o.WithSecrets, "with-secrets", "", "use a secrets file generated with `talosctl gen secrets`")
	f.StringVar(&o.KubernetesVersion, "kubernetes-version", constants.DefaultKubernetesVersion, "desired kubernetes version to run")
	f.StringVar(&o.TalosVersion, "talos-version", "", "the desired Talos version to generate config for (backwards compatibility, e.g. v1.10)")
	f.StringVar(&o.InstallDisk, "install-disk", "/dev/sda", "the disk to install to")
	f.StringVar(&o.InstallImage, "install-image", defaultInstallerImage(), "the image used to perform an installation")
	f.StringVar(&o.DNSDomain, "dns-domain", "cluster.local", "the dns domain to use for cluster")
	f.StringSliceVar(&o.AdditionalSANs, "additional-sans", nil, "additional Subject-Alt-Names for the APIServer certificate")
	f.StringArrayVar(&o.Patches, "config-patch", nil, "patch generated machineconfigs (applied to all node types), use @file to read a patch from file")
	f.StringArrayVar(&o.PatchesControlPlane, "config-patch-control-plane", nil, "patch generated machineconfigs (applied to 'controlplane' type)")
	f.StringArrayVar(&o.PatchesWorker, "config-patch-worker", nil, "patch generated machineconfigs (applied to 'worker' type)")
	f.StringSliceVar(&o.RegistryMirrors, "registry-mirror", nil, "list of registry mirrors to use in format: <registry host>=<mirror URL>")
	f.StringVar(&o.ConfigVersion, "version", "v1alpha1", "the desired machine config version to generate")
	f.BoolVarP(&o.Persist, "persist", "p", true, "the desired persist value for configs")
	f.BoolVar(&o.WithDiscovery, "with-cluster-discovery", true, "enable cluster discovery feature")
	f.BoolVar(&o.WithKubeSpan, "with-kubespan", false, "enable KubeSpan feature")
	f.BoolVar(&o.WithDocs, "with-docs", true, "renders all machine configs adding the documentation for each field")
	f.BoolVar(&o.WithExamples, "with-examples", true, "renders all machine configs with the commented examples")

	return cmd
}

// GenConfig writes the files `talosctl gen config` produces; progress goes to log.
func GenConfig(o GenConfigOptions, log io.Writer) error {
	u, err := url.Parse(o.Endpoint)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("cluster endpoint %q is not a URL: pass it as https://<address>:6443", o.Endpoint)
	}

	for _, t := range o.OutputTypes {
		if !slices.Contains([]string{"controlplane", "worker", "talosconfig"}, t) {
			return fmt.Errorf("unknown output type %q: use controlplane, worker or talosconfig", t)
		}
	}

	in, err := o.input(log)
	if err != nil {
		return err
	}

	if o.OutputDir != "" {
		if err = os.MkdirAll(o.OutputDir, 0o755); err != nil {
			return fmt.Errorf("creating output directory: %w", err)
		}
	}

	commentsFlags := encoder.CommentsDisabled
	if o.WithDocs {
		commentsFlags |= encoder.CommentsDocs
	}

	if o.WithExamples {
		commentsFlags |= encoder.CommentsExamples
	}

	for _, t := range o.OutputTypes {
		var data []byte

		switch t {
		case "controlplane", "worker":
			typ, patches := machine.TypeControlPlane, o.PatchesControlPlane
			if t == "worker" {
				typ, patches = machine.TypeWorker, o.PatchesWorker
			}

			data, err = genMachineConfig(in, typ, slices.Concat(o.Patches, patches), commentsFlags)
		case "talosconfig":
			data, err = genTalosconfig(in)
		}

		if err != nil {
			return err
		}

		name := t + ".yaml"
		if t == "talosconfig" {
			name = t
		}

		path := filepath.Join(o.OutputDir, name)

		if err = writeNew(path, data, o.Force); err != nil {
			return err
		}

		fmt.Fprintf(log, "Created %s\n", path)
	}

	return nil
}

// input is the generation's input: the version contract, the secrets (loaded or generated)
// and the options the flags set.
func (o GenConfigOptions) input(log io.Writer) (*generate.Input, error) {
	var (
		contract *config.VersionContract
		err      error
	)

	if o.TalosVersion != "" {
		if contract, err = config.ParseContractFromVersion(o.TalosVersion); err != nil {
			return nil, fmt.Errorf("--talos-version %q: %w (use a version like v1.11)", o.TalosVersion, err)
		}
	}

	var bundle *secrets.Bundle

	if o.WithSecrets != "" {
		if bundle, err = secrets.LoadBundle(o.WithSecrets); err != nil {
			return nil, fmt.Errorf("loading secrets %s: %w (create one with `talosctl gen secrets`)", o.WithSecrets, err)
		}
	} else {
		fmt.Fprintln(log, "generating PKI and tokens")

		if bundle, err = secrets.NewBundle(secrets.NewClock(), contract); err != nil {
			return nil, fmt.Errorf("generating secrets: %w", err)
		}
	}

	opts := []generate.Option{
		generate.WithSecretsBundle(bundle),
		generate.WithInstallDisk(o.InstallDisk),
		generate.WithInstallImage(o.InstallImage),
		generate.WithDNSDomain(o.DNSDomain),
		generate.WithAdditionalSubjectAltNames(o.AdditionalSANs),
	}

	if contract != nil {
		opts = append(opts, generate.WithVersionContract(contract))
	}

	extra, err := o.extraOptions()
	if err != nil {
		return nil, err
	}

	opts = append(opts, extra...)

	in, err := generate.NewInput(o.ClusterName, o.Endpoint, o.KubernetesVersion, opts...)
	if err != nil {
		return nil, fmt.Errorf("preparing config generation: %w", err)
	}

	return in, nil
}

func genMachineConfig(in *generate.Input, typ machine.Type, patchArgs []string, comments encoder.CommentsFlags) ([]byte, error) {
	cfg, err := in.Config(typ)
	if err != nil {
		return nil, fmt.Errorf("generating %s config: %w", typ, err)
	}

	if len(patchArgs) > 0 {
		patches, err := configpatcher.LoadPatches(patchArgs)
		if err != nil {
			return nil, fmt.Errorf("loading config patches: %w (a patch is inline YAML/JSON or @file)", err)
		}

		out, err := configpatch.Apply(configpatcher.WithConfig(cfg), patches)
		if err != nil {
			return nil, fmt.Errorf("applying config patches to %s config: %w", typ, err)
		}

		if cfg, err = out.Config(); err != nil {
			return nil, fmt.Errorf("patched %s config: %w", typ, err)
		}
	}

	data, err := cfg.EncodeBytes(encoder.WithComments(comments))
	if err != nil {
		return nil, fmt.Errorf("encoding %s config: %w", typ, err)
	}

	return data, nil
}

func genTalosconfig(in *generate.Input) ([]byte, error) {
	tc, err := in.Talosconfig()
	if err != nil {
		return nil, fmt.Errorf("generating talosconfig: %w", err)
	}

	data, err := tc.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encoding talosconfig: %w", err)
	}

	return data, nil
}

// extraOptions turns the persist, discovery, KubeSpan and registry mirror flags into
// generation options.
func (o GenConfigOptions) extraOptions() ([]generate.Option, error) {
	if o.ConfigVersion != "" && o.ConfigVersion != "v1alpha1" {
		return nil, fmt.Errorf("--version %q: the only machine config version is v1alpha1", o.ConfigVersion)
	}

	opts := []generate.Option{generate.WithPersist(o.Persist), generate.WithClusterDiscovery(o.WithDiscovery)}

	if o.WithKubeSpan {
		opts = append(opts, generate.WithNetworkOptions(v1alpha1.WithKubeSpan()))
	}

	for _, m := range o.RegistryMirrors {
		host, endpoint, ok := strings.Cut(m, "=")
		if !ok || host == "" || endpoint == "" {
			return nil, fmt.Errorf("--registry-mirror %q: use <registry host>=<mirror URL>, e.g. docker.io=http://10.5.0.1:5000", m)
		}

		opts = append(opts, generate.WithRegistryMirror(host, endpoint))
	}

	return opts, nil
}

// writeNew writes a file, refusing to replace an existing one unless force.
func writeNew(path string, data []byte, force bool) error {
	if !force {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%s already exists: use --force to overwrite it", path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}

	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}

	return nil
}

func genSecretsCmd(force *bool) *cobra.Command {
	var out, fromPKI, fromConfig, token, talosVersion string

	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Generate a secrets bundle file which can later be used to generate a config",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				contract *config.VersionContract
				bundle   *secrets.Bundle
				err      error
			)

			if talosVersion != "" {
				if contract, err = config.ParseContractFromVersion(talosVersion); err != nil {
					return fmt.Errorf("--talos-version %q: %w (use a version like v1.11)", talosVersion, err)
				}
			}

			switch {
			case fromConfig != "":
				// The cluster secrets of an existing control plane config: configs generated from
				// this bundle join that cluster.
				var cfg config.Provider

				if cfg, err = configloader.NewFromFile(fromConfig); err != nil {
					return fmt.Errorf("--from-controlplane-config %s: %w", fromConfig, err)
				}

				if cfg.Machine() == nil || !cfg.Machine().Type().IsControlPlane() {
					return fmt.Errorf("--from-controlplane-config %s: not a control plane config (a worker's holds no CA keys): use controlplane.yaml", fromConfig)
				}

				bundle = secrets.NewBundleFromConfig(secrets.NewClock(), cfg)
			case fromPKI != "":
				bundle, err = secrets.NewBundleFromKubernetesPKI(fromPKI, token, contract)
			default:
				bundle, err = secrets.NewBundle(secrets.NewClock(), contract)
			}

			if err != nil {
				return fmt.Errorf("generating secrets bundle: %w", err)
			}

			data, err := yaml.Marshal(bundle)
			if err != nil {
				return fmt.Errorf("encoding secrets bundle: %w", err)
			}

			if err = writeNew(out, data, *force); err != nil {
				return err
			}

			fmt.Fprintf(cmd.ErrOrStderr(), "Created %s\n", out)

			return nil
		},
	}

	cmd.Flags().StringVarP(&out, "output-file", "o", "secrets.yaml", "path of the output file")
	cmd.Flags().StringVarP(&fromPKI, "from-kubernetes-pki", "p", "", "use a Kubernetes PKI directory (e.g. /etc/kubernetes/pki) as input")
	cmd.Flags().StringVar(&fromConfig, "from-controlplane-config", "", "use the provided controlplane Talos machine configuration as input")
	cmd.Flags().StringVarP(&token, "kubernetes-bootstrap-token", "t", "", "use the provided bootstrap token as input")
	cmd.Flags().StringVar(&talosVersion, "talos-version", "", "the desired Talos version to generate secrets bundle for (backwards compatibility, e.g. v1.10)")

	return cmd
}
