// Package cri holds the controllers of containerd's CRI configuration.
package cri

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
)

// RegistriesController writes machine.registries as containerd's registry hosts folder
// (certs.d layout: <host>/hosts.toml with its CA and client certificate): the mirrors of each
// registry, tried in order before the registry itself (not after the last one with
// skipFallback), and each registry's TLS settings. CRI reads the folder at each pull, so a
// change applies without a restart; `talosctl image pull` resolves through it too.
type RegistriesController struct {
	// Dir is the hosts folder (containerd's config_path).
	Dir string
}

// Name implements controller.Controller.
func (ctrl *RegistriesController) Name() string { return "cri.RegistriesController" }

// Inputs implements controller.Controller.
func (ctrl *RegistriesController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller: files only.
func (ctrl *RegistriesController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *RegistriesController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		var err error

		var regs talosconfig.Registries
		if cfg != nil && cfg.Config().Machine() != nil {
			regs = cfg.Config().Machine().Registries()
		}

		if err = WriteHosts(ctrl.Dir, regs); err != nil {
			return err
		}

		r.ResetRestartBackoff()

		return nil
	})
}

// HostFiles renders the hosts folder: file path (relative to the folder) to content.
func HostFiles(dir string, regs talosconfig.Registries) (map[string][]byte, error) {
	files := map[string][]byte{}

	if regs == nil {
		return files, nil
	}

	hosts := map[string]bool{}
	for h := range regs.Mirrors() {
		hosts[h] = true
	}

	for h := range regs.Config() {
		hosts[h] = true
	}

	for _, host := range slices.Sorted(func(yield func(string) bool) {
		for h := range hosts {
			if !yield(h) {
				return
			}
		}
	}) {
		folder := host
		if host == "*" {
			folder = "_default" // containerd's folder for every registry without its own
		}

		var b strings.Builder

		mirror := regs.Mirrors()[host]
		endpoints := []talosconfig.RegistryEndpointConfig(nil)

		if mirror != nil {
			endpoints = mirror.Endpoints()
		}

		// The registry itself is containerd's last resort ("server"); with skipFallback the last
		// mirror takes its place, so nothing else is asked.
		server := registryServer(host)
		if mirror != nil && mirror.SkipFallback() && len(endpoints) > 0 {
			last := endpoints[len(endpoints)-1]
			server, endpoints = last.Endpoint(), endpoints[:len(endpoints)-1]
		}

		if server != "" {
			fmt.Fprintf(&b, "server = %q\n", server)
		}

		tlsLines, tlsFiles := tlsSettings(dir, folder, "", regs.Config()[host])
		maps.Copy(files, tlsFiles)

		// The server's TLS: the registry's, or with skipFallback the last mirror's own.
		serverLines := tlsLines

		if u, err := url.Parse(server); err == nil && u.Host != host {
			if rc, ok := regs.Config()[u.Host]; ok {
				var serverFiles map[string][]byte

				serverLines, serverFiles = tlsSettings(dir, folder, strings.ReplaceAll(u.Host, ":", "_")+"-", rc)
				maps.Copy(files, serverFiles)
			}
		}

		b.WriteString(serverLines)

		for _, ep := range endpoints {
			u, err := url.Parse(ep.Endpoint())
			if err != nil {
				return nil, fmt.Errorf("machine.registries.mirrors.%s.endpoints: %q: %w", host, ep.Endpoint(), err)
			}

			fmt.Fprintf(&b, "\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", ep.Endpoint())

			if ep.OverridePath() {
				b.WriteString("  override_path = true\n")
			}

			// A mirror's TLS settings are those of its own host:port, as upstream's (and as CRI
			// looks up its credentials); without any, the registry's apply.
			epLines := tlsLines

			if rc, ok := regs.Config()[u.Host]; ok && u.Host != host {
				var epFiles map[string][]byte

				epLines, epFiles = tlsSettings(dir, folder, strings.ReplaceAll(u.Host, ":", "_")+"-", rc)
				maps.Copy(files, epFiles)
			}

			b.WriteString(indent(epLines))
		}

		files[filepath.Join(folder, "hosts.toml")] = []byte(b.String())
	}

	return files, nil
}

// registryServer is the registry's own address, as containerd names docker.io's.
func registryServer(host string) string {
	switch host {
	case "*":
		return ""
	case "docker.io":
		return "https://registry-1.docker.io"
	default:
		return "https://" + host
	}
}

// tlsSettings are a registry's TLS lines of hosts.toml and the files they name (prefix
// before their names).
func tlsSettings(dir, folder, prefix string, rc talosconfig.RegistryConfig) (string, map[string][]byte) {
	if rc == nil || rc.TLS() == nil {
		return "", nil
	}

	var (
		b     strings.Builder
		files = map[string][]byte{}
		tls   = rc.TLS()
	)

	if tls.InsecureSkipVerify() {
		b.WriteString("skip_verify = true\n")
	}

	if ca := tls.CA(); len(ca) > 0 {
		files[filepath.Join(folder, prefix+"ca.crt")] = ca
		fmt.Fprintf(&b, "ca = %q\n", filepath.Join(dir, folder, prefix+"ca.crt"))
	}

	if id := tls.ClientIdentity(); id != nil && len(id.Crt) > 0 {
		files[filepath.Join(folder, prefix+"client.crt")] = id.Crt
		files[filepath.Join(folder, prefix+"client.key")] = id.Key
		fmt.Fprintf(&b, "client = [[%q, %q]]\n", filepath.Join(dir, folder, prefix+"client.crt"), filepath.Join(dir, folder, prefix+"client.key"))
	}

	return b.String(), files
}

func indent(s string) string {
	if s == "" {
		return ""
	}

	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// WriteHosts makes dir hold exactly the rendered files (keys 0600), leaving unchanged files be.
func WriteHosts(dir string, regs talosconfig.Registries) error {
	files, err := HostFiles(dir, regs)
	if err != nil {
		return err
	}

	if err = os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	// Whatever the config no longer names goes.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}

	for _, e := range entries {
		folder := filepath.Join(dir, e.Name())

		if !e.IsDir() || !hasPrefix(files, e.Name()+string(filepath.Separator)) {
			if err = os.RemoveAll(folder); err != nil {
				return err
			}

			continue
		}

		inner, err := os.ReadDir(folder)
		if err != nil {
			return err
		}

		for _, f := range inner {
			if _, keep := files[filepath.Join(e.Name(), f.Name())]; !keep {
				if err = os.RemoveAll(filepath.Join(folder, f.Name())); err != nil {
					return err
				}
			}
		}
	}

	for name, data := range files {
		path := filepath.Join(dir, name)

		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			continue
		}

		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}

		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}

		if err = os.WriteFile(path, data, mode); err != nil {
			return err
		}
	}

	return nil
}

func hasPrefix(files map[string][]byte, prefix string) bool {
	for name := range files {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}

	return false
}
