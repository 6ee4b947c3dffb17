package network

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SetKernelHostname makes hostname and domain the kernel's: the Apply of a node with its own
// UTS namespace (container mode, metal), so that `get hostnamestatus` is what uname says.
func SetKernelHostname(hostname, domain string) error {
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("sethostname %q: %w", hostname, err)
	}

	if err := unix.Setdomainname([]byte(domain)); err != nil {
		return fmt.Errorf("setdomainname %q: %w", domain, err)
	}

	return nil
}
