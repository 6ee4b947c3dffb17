package cri

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
)

// AuthPartName is the CRI config part that carries machine.registries.config credentials, as
// upstream's 01-registries.part: merged into containerd's config before the user's parts.
const AuthPartName = "01-registries.part"

// AuthPart renders the credentials of machine.registries.config as a CRI config part
// (registry.configs."<host>".auth of the CRI images plugin). CRI asks for credentials by the
// host it connects to, a mirror endpoint's host:port or the registry's own, so the config's
// key names that host, as upstream documents. hosts.toml has no place for credentials (by
// containerd's design), and CRI reads this part only when containerd starts. "" when no
// registry has credentials.
func AuthPart(regs talosconfig.Registries) (string, error) {
	if regs == nil {
		return "", nil
	}

	configs := map[string]any{}

	for host, rc := range regs.Config() {
		if rc == nil || rc.Auth() == nil {
			continue
		}

		a := rc.Auth()
		auth := map[string]string{}

		for key, v := range map[string]string{"username": a.Username(), "password": a.Password(), "auth": a.Auth(), "identitytoken": a.IdentityToken()} {
			if v != "" {
				auth[key] = v
			}
		}

		if len(auth) == 0 { // an empty auth: no credentials
			continue
		}

		configs[host] = map[string]any{"auth": auth}
	}

	if len(configs) == 0 {
		return "", nil
	}

	part := map[string]any{"plugins": map[string]any{"io.containerd.cri.v1.images": map[string]any{"registry": map[string]any{"configs": configs}}}}

	out, err := toml.Marshal(part)
	if err != nil {
		return "", err
	}

	return string(out), nil
}

// WriteAuthPart writes AuthPart to dir (0600: it holds passwords), or removes the part of an
// earlier config when there are no credentials.
func WriteAuthPart(dir string, regs talosconfig.Registries) error {
	part, err := AuthPart(regs)
	if err != nil {
		return err
	}

	path := filepath.Join(dir, AuthPartName)

	if part == "" {
		if err = os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}

		return nil
	}

	if err = os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	return os.WriteFile(path, []byte(part), 0o600)
}
