package talosctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// TalosconfigEnv names the environment variable that points at the client configuration.
const TalosconfigEnv = "TALOSCONFIG"

// ConfigPath returns the client configuration file to use, in this order: the --talosconfig
// flag, $TALOSCONFIG, $XDG_CONFIG_HOME/talos/config.yaml if it exists, $HOME/.talos/config.
// When neither default file exists, $HOME/.talos/config is returned (the file a write creates).
func ConfigPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}

	if env := os.Getenv(TalosconfigEnv); env != "" {
		return env, nil
	}

	if xdg := os.Getenv("XDG_CONFIG_HOME"); xdg != "" {
		p := filepath.Join(xdg, "talos", "config.yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}

	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the home directory for the default talosconfig: %w (pass --talosconfig or set %s)", err, TalosconfigEnv)
	}

	return filepath.Join(home, ".talos", "config"), nil
}

// loadConfig reads the client configuration. A missing file is an error unless allowMissing,
// in which case an empty configuration is returned (commands that write create the file).
func loadConfig(flag string, allowMissing bool) (*clientconfig.Config, string, error) {
	path, err := ConfigPath(flag)
	if err != nil {
		return nil, "", err
	}

	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if allowMissing {
				return &clientconfig.Config{Contexts: map[string]*clientconfig.Context{}}, path, nil
			}

			return nil, path, fmt.Errorf("talosconfig %s does not exist: create one with `talosctl gen config` and `talosctl config merge ./talosconfig`, or pass --talosconfig", path)
		}

		return nil, path, fmt.Errorf("reading talosconfig %s: %w", path, err)
	}

	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		return nil, path, fmt.Errorf("parsing talosconfig %s: %w (fix or remove the file)", path, err)
	}

	if cfg.Contexts == nil {
		cfg.Contexts = map[string]*clientconfig.Context{}
	}

	return cfg, path, nil
}

// currentContext returns the context selected by --context or the file's current context.
func currentContext(cfg *clientconfig.Config, override, path string) (string, *clientconfig.Context, error) {
	name := cfg.Context
	if override != "" {
		name = override
	}

	if name == "" {
		return "", nil, fmt.Errorf("talosconfig %s has no current context: pick one with `talosctl config context <name>` or pass --context", path)
	}

	ctx, ok := cfg.Contexts[name]
	if !ok {
		return name, nil, fmt.Errorf("context %q is not in talosconfig %s: list contexts with `talosctl config contexts`", name, path)
	}

	return name, ctx, nil
}
