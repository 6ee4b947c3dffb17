package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/machined/trustbundle"
)

// bindTrustBundle keeps the image's CA bundle aside as the system's and binds a writable copy
// over /etc/ssl/certs/ca-certificates.crt: machined rewrites that copy in place with the
// config's TrustedRootsConfig roots, and every program of the node reads it there.
func bindTrustBundle(root string) error {
	etc := filepath.Join(root, trustbundle.Etc)

	system, err := os.ReadFile(etc)
	if err != nil {
		return fmt.Errorf("the node image has no %s to extend with trusted roots: rebuild it with `make rootfs`: %w", trustbundle.Etc, err)
	}

	// A second start in the same /system (it is a tmpfs of this boot) keeps the first copy:
	// /etc's is the node's bundle by then, extra roots included.
	sys := filepath.Join(root, trustbundle.System)
	if _, err = os.Stat(sys); errors.Is(err, os.ErrNotExist) {
		if err = writeBundle(sys, system); err != nil {
			return err
		}
	}

	node := filepath.Join(root, trustbundle.Node)
	if err = writeBundle(node, system); err != nil {
		return err
	}

	if err = unix.Mount(node, etc, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mounting %s over %s: %w", trustbundle.Node, trustbundle.Etc, err)
	}

	return nil
}

func writeBundle(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}

	return os.WriteFile(path, data, 0o644)
}
