package upgrade

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/imager"
)

// downloader fetches remote images; no proxy from the environment: the node names its source.
var downloader = &http.Client{Transport: &http.Transport{Proxy: nil}}

// extractImage verifies and unpacks the image at src into dest: a file on the node's host, an
// http(s) URL whose body is checked as it arrives (a metal node has no room for the image and
// its unpacked slot both, and no host to read a file from), or an installer image's reference,
// pulled through machine.registries and streamed the same way.
func (m *Manager) extractImage(ctx context.Context, src string, keys []ed25519.PublicKey, dest string) (*imager.Manifest, error) {
	if isImageReference(src) {
		return m.pullInstaller(ctx, src, keys, dest)
	}

	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		return imager.Extract(src, keys, dest)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("image URL %q: %w", src, err)
	}

	resp, err := downloader.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading the image: %w", err)
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("downloading the image %s: %w (HTTP %s)", src, os.ErrNotExist, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("downloading the image %s: HTTP %s", src, resp.Status)
	}

	return imager.ExtractFrom(resp.Body, keys, dest)
}

// pullInstaller pulls an installer image with the active config's machine.registries.
func (m *Manager) pullInstaller(ctx context.Context, ref string, keys []ed25519.PublicKey, dest string) (*imager.Manifest, error) {
	var regs talosconfig.Registries
	if cfg := m.R.Config(); cfg != nil && cfg.Machine() != nil {
		regs = cfg.Machine().Registries()
	}

	run := filepath.Join(m.R.Paths.System(), "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		return nil, err
	}

	hostsDir, err := os.MkdirTemp(run, "installer-registries-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(hostsDir)

	return pullInstaller(ctx, pullSource{regs: regs, hostsDir: hostsDir}, ref, keys, dest)
}
