package metal

import (
	"os"

	"golang.org/x/sys/unix"
)

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
