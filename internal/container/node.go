package container

import (
	"os"

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
