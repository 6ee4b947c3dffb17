package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func kubeconfigCmd(g *Global) *cobra.Command {
	var (
		force, merge bool
		contextName  string
	)

	cmd := &cobra.Command{
		Use:   "kubeconfig [local-path]",
		Short: "Download the admin kubeconfig from the node",
		Long: "Downloads the admin kubeconfig from the node and merges it into the default kubeconfig " +
			"($KUBECONFIG or ~/.kube/config). Names that already exist get an index suffix unless --force. " +
			"If local-path is a directory, a file named kubeconfig is written there; '-' writes to stdout.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := kubeconfigPath(args)
			if err != nil {
				return err
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "kubeconfig")
				if err != nil {
					return err
				}

				data, err := s.c.Kubeconfig(ctx)
				if err != nil {
					return fmt.Errorf("downloading the kubeconfig: %w%s (is Kubernetes bootstrapped on this node?)", err, hint(err))
				}

				if path == "-" {
					_, err = cmd.OutOrStdout().Write(data)

					return err
				}

				if st, err := os.Stat(path); err == nil && st.IsDir() {
					path = filepath.Join(path, "kubeconfig")
					merge = false
				}

				if merge {
					return mergeKubeconfigFile(path, data, contextName, force, cmd.ErrOrStderr())
				}

				if err := refuseOverwrite(path, force); err != nil {
					return err
				}

				return writeKubeconfig(path, data, contextName)
			})
		},
	}

	cmd.Flags().BoolVarP(&force, "force", "f", false, "force overwrite of kubeconfig if already present, force overwrite on kubeconfig merge")
	cmd.Flags().BoolVarP(&merge, "merge", "m", true, "merge with existing kubeconfig")
	cmd.Flags().StringVar(&contextName, "force-context-name", "", "force context name for kubeconfig merge")

	return cmd
}

func kubeconfigPath(args []string) (string, error) {
	if len(args) == 1 {
		return args[0], nil
	}

	if env := os.Getenv("KUBECONFIG"); env != "" {
		return filepath.SplitList(env)[0], nil
	}

	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the home directory: %w (pass the kubeconfig path as an argument)", err)
	}

	return filepath.Join(home, ".kube", "config"), nil
}

func refuseOverwrite(path string, force bool) error {
	if _, err := os.Stat(path); err == nil && !force {
		return fmt.Errorf("%s already exists: use --force to overwrite it, or --merge", path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}

	return nil
}

func writeKubeconfig(path string, data []byte, contextName string) error {
	if contextName != "" {
		kc, err := clientcmd.Load(data)
		if err != nil {
			return fmt.Errorf("parsing the downloaded kubeconfig: %w", err)
		}

		renameContext(kc, contextName)

		if data, err = clientcmd.Write(*kc); err != nil {
			return err
		}
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}

	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}

	return nil
}

func renameContext(kc *clientcmdapi.Config, name string) {
	if ctx, ok := kc.Contexts[kc.CurrentContext]; ok {
		delete(kc.Contexts, kc.CurrentContext)
		kc.Contexts[name] = ctx
	}

	kc.CurrentContext = name
}

// mergeKubeconfigFile merges data into the kubeconfig at path, or writes it there when there is
// none yet.
func mergeKubeconfigFile(path string, data []byte, contextName string, force bool, log interface{ Write([]byte) (int, error) }) error {
	existing, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return writeKubeconfig(path, data, contextName)
	}

	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}

	base, err := clientcmd.Load(existing)
	if err != nil {
		return fmt.Errorf("parsing %s: %w (fix it, or write elsewhere with `talosctl kubeconfig <path>`)", path, err)
	}

	add, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("parsing the downloaded kubeconfig: %w", err)
	}

	if contextName != "" {
		renameContext(add, contextName)
	}

	for _, r := range mergeKubeconfig(base, add, force) {
		fmt.Fprintf(log, "renamed %s\n", r)
	}

	out, err := clientcmd.Write(*base)
	if err != nil {
		return err
	}

	return writeKubeconfig(path, out, "")
}

// mergeKubeconfig adds the clusters, contexts and users of add to base and makes add's
// current context the current one. A clashing name gets the first free index suffix
// (name-1, name-2, ...) and the contexts follow their renamed cluster and user, unless force,
// which replaces the existing entries. It returns the renames made.
func mergeKubeconfig(base, add *clientcmdapi.Config, force bool) []string {
	var renames []string

	free := func(kind string, taken func(string) bool, name string) string {
		if force || !taken(name) {
			return name
		}

		for i := 1; ; i++ {
			if candidate := name + "-" + strconv.Itoa(i); !taken(candidate) {
				renames = append(renames, fmt.Sprintf("%s %q -> %q", kind, name, candidate))

				return candidate
			}
		}
	}

	clusters, users := map[string]string{}, map[string]string{}

	for _, name := range slices.Sorted(maps.Keys(add.Clusters)) {
		clusters[name] = free("cluster", has(base.Clusters), name)
		base.Clusters[clusters[name]] = add.Clusters[name]
	}

	for _, name := range slices.Sorted(maps.Keys(add.AuthInfos)) {
		users[name] = free("user", has(base.AuthInfos), name)
		base.AuthInfos[users[name]] = add.AuthInfos[name]
	}

	for _, name := range slices.Sorted(maps.Keys(add.Contexts)) {
		ctx := *add.Contexts[name]

		// The context follows its renamed cluster and user.
		if n, ok := clusters[ctx.Cluster]; ok {
			ctx.Cluster = n
		}

		if n, ok := users[ctx.AuthInfo]; ok {
			ctx.AuthInfo = n
		}

		newName := free("context", has(base.Contexts), name)
		if name == add.CurrentContext {
			base.CurrentContext = newName
		}

		base.Contexts[newName] = &ctx
	}

	return renames
}

func has[V any](m map[string]V) func(string) bool {
	return func(name string) bool {
		_, ok := m[name]

		return ok
	}
}
