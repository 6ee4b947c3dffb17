package container

import (
	"fmt"
	"os"

	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"

	"golang.org/x/sys/unix"
)

// InNode reports whether this machined is the init of a node started by Launch.
func InNode() bool { return os.Getpid() == 1 && os.Getenv(EnvNode) != "" }

// Reboot ends the node as a container's init reboots: reboot(2) in a pid namespace kills its
// init with SIGHUP, and the launcher starts the node again with a fresh root. It returns only
// on error.
func Reboot() error {
	unix.Sync()

	return os.NewSyscallError("reboot", unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART))
}

// ApplyHostname makes a hostname effective in the node: the uts namespace's names, and
// /system/etc/hostname and /system/etc/hosts, which Init bound over the image's /etc files
// (written in place, so the binds stay). address is the node's own.
func ApplyHostname(address string) func(hostname, domain string) error {
	return func(hostname, domain string) error {
		if err := networkctrl.SetKernelHostname(hostname, domain); err != nil {
			return err
		}

		names := hostname
		if domain != "" {
			names = hostname + "." + domain + "\t" + hostname
		}

		if err := os.WriteFile("/system/etc/hosts", []byte(hostsFile(address, names)), 0o644); err != nil {
			return err
		}

		return os.WriteFile("/system/etc/hostname", []byte(hostname+"\n"), 0o644)
	}
}

// hostsFile is the node's /etc/hosts: localhost and its own address with its names.
func hostsFile(address, names string) string {
	return fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", address, names)
}
