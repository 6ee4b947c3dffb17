package provision

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/registry"
)

// RegistryPort is the port of --with-registry's registry on the cluster network's gateway.
const RegistryPort = 5000

// RegistryUser is the user --with-registry's registry accepts (its password is random, kept in
// the cluster folder's registry/users.json).
const RegistryUser = "talos"

// Registry is what a cluster's registry is: where it serves, its CA and credentials, the
// detached process (container provisioner, --with-registry).
type Registry struct {
	Host     string `yaml:"host"`     // host:port, as image references name it
	CA       string `yaml:"ca"`       // the CA file clients trust
	Username string `yaml:"username"` // the password is in Dir/registry/users.json
	PID      int    `yaml:"pid,omitempty"`
}

// registryFiles makes the registry's certificate (for addr), CA and password in dir/registry,
// and the config patch that points every node at it: its CA and credentials under
// machine.registries.config, and a mirror for every registry ("*"), so a pull tries it
// first and falls back to the registry the reference names.
func registryFiles(dir string, addr netip.AddrPort) (*Registry, string, error) {
	regDir := filepath.Join(dir, "registry")
	if err := os.MkdirAll(filepath.Join(regDir, "blobs"), 0o700); err != nil {
		return nil, "", err
	}

	caPEM, crtPEM, keyPEM, err := registry.ServerCert(addr.Addr().String())
	if err != nil {
		return nil, "", err
	}

	secret := make([]byte, 16)
	if _, err = io.ReadFull(rand.Reader, secret); err != nil {
		return nil, "", err
	}

	password := hex.EncodeToString(secret)

	users, err := json.Marshal(map[string]string{RegistryUser: password})
	if err != nil {
		return nil, "", err
	}

	for name, data := range map[string][]byte{"ca.crt": caPEM, "server.crt": crtPEM, "server.key": keyPEM, "users.json": users} {
		if err = os.WriteFile(filepath.Join(regDir, name), data, 0o600); err != nil {
			return nil, "", err
		}
	}

	reg := &Registry{Host: addr.String(), CA: filepath.Join(regDir, "ca.crt"), Username: RegistryUser}

	patch, err := json.Marshal(map[string]any{"machine": map[string]any{"registries": map[string]any{
		"mirrors": map[string]any{"*": map[string]any{"endpoints": []string{"https://" + reg.Host}}},
		"config": map[string]any{reg.Host: map[string]any{
			"tls":  map[string]any{"ca": caPEM}, // []byte: base64, as the config keeps it
			"auth": map[string]any{"username": RegistryUser, "password": password},
		}},
	}}})
	if err != nil {
		return nil, "", err
	}

	return reg, string(patch), nil
}

// startRegistry starts the cluster's registry, detached as the nodes are, on addr: the
// listener is made here, so a port in use is refused at once.
func (c *Cluster) startRegistry(addr netip.AddrPort, progress io.Writer) error {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr))
	if err != nil {
		return fmt.Errorf("--with-registry: %w (is another registry using port %d?)", err, addr.Port())
	}

	f, err := ln.File()
	ln.Close()

	if err != nil {
		return err
	}
	defer f.Close()

	regDir := filepath.Join(c.Dir, "registry")

	fmt.Fprintf(progress, "starting the registry at https://%s (user %s, password in %s)\n", addr, RegistryUser, filepath.Join(regDir, "users.json"))

	c.Registry.PID, err = c.StartDetached("registry.log", []*os.File{f}, "registry", "--cluster", c.Dir,
		"--cert", filepath.Join(regDir, "server.crt"), "--key", filepath.Join(regDir, "server.key"),
		"--users", filepath.Join(regDir, "users.json"), "--blobs", filepath.Join(regDir, "blobs"))

	return err
}
