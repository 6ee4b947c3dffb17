package metal

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
)

// OwnsMachine reports whether this process is the init of a machine on its own kernel: PID 1
// in the kernel's first pid namespace, where reboot(2) resets or powers off the machine.
func OwnsMachine() bool {
	return os.Getpid() == 1 && os.Getenv(container.EnvNode) == ""
}

// Power ends the machine: its filesystems are synced, then it reboots or powers off. It
// returns only on error.
func Power(reboot bool) error {
	unix.Sync()

	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if reboot {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}

	return os.NewSyscallError("reboot", unix.Reboot(cmd))
}
