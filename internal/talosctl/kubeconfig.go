package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
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

// kubeconfig is the part of a kubeconfig file the merge needs; other keys are kept as they are.
type kubeconfig struct {
	APIVersion     string         `yaml:"apiVersion,omitempty"`
	Kind           string         `yaml:"kind,omitempty"`
	Clusters       []namedEntry   `yaml:"clusters"`
	Contexts       []namedEntry   `yaml:"contexts"`
	CurrentContext string         `yaml:"current-context"`
	Users          []namedEntry   `yaml:"users"`
	Rest           map[string]any `yaml:",inline"`
}

type namedEntry struct {
	Name    string         `yaml:"name"`
	Cluster map[string]any `yaml:"cluster,omitempty"`
	Context map[string]any `yaml:"context,omitempty"`
	User    map[string]any `yaml:"user,omitempty"`
}

func writeKubeconfig(path string, data []byte, contextName string) error {
	if contextName != "" {
		var kc kubeconfig
		if err := yaml.Unmarshal(data, &kc); err != nil {
			return fmt.Errorf("parsing the downloaded kubeconfig: %w", err)
		}

		renameContext(&kc, contextName)

		var err error
		if data, err = yaml.Marshal(&kc); err != nil {
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

func renameContext(kc *kubeconfig, name string) {
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == kc.CurrentContext {
			kc.Contexts[i].Name = name
		}
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

	var base, add kubeconfig

	if err = yaml.Unmarshal(existing, &base); err != nil {
		return fmt.Errorf("parsing %s: %w (fix it, or write elsewhere with `talosctl kubeconfig <path>`)", path, err)
	}

	if err = yaml.Unmarshal(data, &add); err != nil {
		return fmt.Errorf("parsing the downloaded kubeconfig: %w", err)
	}

	if contextName != "" {
		renameContext(&add, contextName)
	}

	for _, r := range mergeKubeconfig(&base, &add, force) {
		fmt.Fprintf(log, "renamed %s\n", r)
	}

	out, err := yaml.Marshal(&base)
	if err != nil {
		return err
	}

	return writeKubeconfig(path, out, "")
}

// mergeKubeconfig adds the clusters, contexts and users of add to base and makes add's
// current context the current one. A clashing name gets the first free index suffix
// (name-1, name-2, ...) and the contexts follow their renamed cluster and user, unless force,
// which replaces the existing entries. It returns the renames made.
func mergeKubeconfig(base, add *kubeconfig, force bool) []string {
	var renames []string

	free := func(kind string, have []namedEntry, name string) string {
		if force || !hasName(have, name) {
			return name
		}

		for i := 1; ; i++ {
			if candidate := name + "-" + strconv.Itoa(i); !hasName(have, candidate) {
				renames = append(renames, fmt.Sprintf("%s %q -> %q", kind, name, candidate))

				return candidate
			}
		}
	}

	clusters, users := map[string]string{}, map[string]string{}

	for _, c := range add.Clusters {
		clusters[c.Name] = free("cluster", base.Clusters, c.Name)
		c.Name = clusters[c.Name]
		base.Clusters = upsert(base.Clusters, c)
	}

	for _, u := range add.Users {
		users[u.Name] = free("user", base.Users, u.Name)
		u.Name = users[u.Name]
		base.Users = upsert(base.Users, u)
	}

	for _, c := range add.Contexts {
		c.Context = renameRefs(c.Context, clusters, users)
		isCurrent := c.Name == add.CurrentContext
		c.Name = free("context", base.Contexts, c.Name)

		if isCurrent {
			base.CurrentContext = c.Name
		}

		base.Contexts = upsert(base.Contexts, c)
	}

	return renames
}

func hasName(list []namedEntry, name string) bool {
	for _, e := range list {
		if e.Name == name {
			return true
		}
	}

	return false
}

func upsert(list []namedEntry, e namedEntry) []namedEntry {
	for i := range list {
		if list[i].Name == e.Name {
			list[i] = e

			return list
		}
	}

	return append(list, e)
}

// renameRefs points a context at its renamed cluster and user.
func renameRefs(ctx map[string]any, clusters, users map[string]string) map[string]any {
	out := make(map[string]any, len(ctx))

	for k, v := range ctx {
		if s, ok := v.(string); ok {
			switch k {
			case "cluster":
				if n, ok := clusters[s]; ok {
					v = n
				}
			case "user":
				if n, ok := users[s]; ok {
					v = n
				}
			}
		}

		out[k] = v
	}

	return out
}
