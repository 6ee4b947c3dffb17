package container

import (
	"os"

	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"

	"golang.org/x/sys/unix"
)

// Reboot ends the node as a container's init reboots: reboot(2) in a pid namespace kills its
// init with SIGHUP, and the launcher starts the node again with a fresh root. It returns only
// on error.
func Reboot() error {
	unix.Sync()

	return os.NewSyscallError("reboot", unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART))
}

// ApplyHostname makes a hostname effective in the node: the uts namespace's names and
// /system/etc/hostname, which Init bound over the image's (written in place, so the bind stays).
// /etc/hosts follows the hostname status (network.EtcHostsController).
func ApplyHostname(hostname, domain string) error {
	if err := networkctrl.SetKernelHostname(hostname, domain); err != nil {
		return err
	}

	return os.WriteFile("/system/etc/hostname", []byte(hostname+"\n"), 0o644)
}

// HostsPath is the node's /etc/hosts as written: Init binds it over the image's.
const HostsPath = "/system/etc/hosts"

// hostsFile is the node's first /etc/hosts: localhost and its own address with its names.
func hostsFile(address, hostname string) string {
	return networkctrl.HostsFile(address, hostname, "", nil)
}
