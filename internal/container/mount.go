package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one of --mount's: a host folder or file bound into the node, or a tmpfs.
type Mount struct {
	Type     string `json:"type"`             // bind or tmpfs
	Source   string `json:"source,omitempty"` // the host's path (bind)
	Target   string `json:"target"`           // the path in the node
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// ParseMount reads docker's --mount syntax, as upstream's flag takes it:
// type=bind,source=/host/path,target=/var/path[,readonly], or type=tmpfs,target=/var/path.
// A bind's source must exist.
func ParseMount(s string) (Mount, error) {
	m := Mount{Type: "bind"}

	for _, field := range strings.Split(s, ",") {
		key, value, hasValue := strings.Cut(strings.TrimSpace(field), "=")

		switch strings.ToLower(key) {
		case "type":
			m.Type = value
		case "source", "src":
			m.Source = value
		case "target", "destination", "dst":
			m.Target = value
		case "readonly", "ro":
			m.ReadOnly = !hasValue || value == "true" || value == "1"
		case "bind-propagation", "consistency":
			// Docker's: the node's mounts are private, as its root is.
		default:
			return Mount{}, fmt.Errorf("--mount %q: unknown field %q: give type=bind,source=<host path>,target=<node path>[,readonly]", s, key)
		}
	}

	switch {
	case m.Type != "bind" && m.Type != "tmpfs":
		return Mount{}, fmt.Errorf("--mount %q: type %q is not supported: use bind or tmpfs", s, m.Type)
	case !filepath.IsAbs(m.Target):
		return Mount{}, fmt.Errorf("--mount %q: target must be an absolute path in the node, like /var/mnt/data", s)
	case m.Type == "bind" && !filepath.IsAbs(m.Source):
		return Mount{}, fmt.Errorf("--mount %q: source must be an absolute path on this host", s)
	case m.Type == "tmpfs" && m.Source != "":
		return Mount{}, fmt.Errorf("--mount %q: a tmpfs has no source", s)
	}

	if m.Type == "bind" {
		if _, err := os.Stat(m.Source); err != nil {
			return Mount{}, fmt.Errorf("--mount %q: %w", s, err)
		}
	}

	m.Target = filepath.Clean(m.Target)

	return m, nil
}

// mountUser mounts the --mount list into the node's root at root (before the pivot, while the
// host's paths are still reachable). The image is read-only: a target must be on a writable
// folder (/var, /opt, /tmp, /system) or exist in the image.
func mountUser(mounts []Mount, root string) error {
	for _, m := range mounts {
		target := filepath.Join(root, m.Target)

		src, fstype, flags := m.Source, "", uintptr(unix.MS_BIND|unix.MS_REC)
		if m.Type == "tmpfs" {
			src, fstype, flags = "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV
		}

		if _, err := os.Stat(target); err == nil {
			// There already (the image's folder or file): mounted over.
		} else if err = mountPoint(mnt{source: m.Source, flags: flags}, target); err != nil {
			if errors.Is(err, unix.EROFS) {
				return fmt.Errorf("--mount target %s: the node image is read-only there: mount under /var, /opt or /tmp", m.Target)
			}

			return fmt.Errorf("--mount target %s: %w", m.Target, err)
		}

		if err := unix.Mount(src, target, fstype, flags, ""); err != nil {
			return fmt.Errorf("--mount %s on %s: %w", src, m.Target, err)
		}

		if m.ReadOnly {
			if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("--mount %s: read-only: %w", m.Target, err)
			}
		}
	}

	return nil
}

// disableIPv6 turns IPv6 off on every link of this network namespace, and on those to come.
func disableIPv6() error {
	for _, scope := range []string{"all", "default"} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+scope+"/disable_ipv6", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("--docker-disable-ipv6: %w", err)
		}
	}

	return nil
}
