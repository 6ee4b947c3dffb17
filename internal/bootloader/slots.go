// Package bootloader is the container-mode boot stage: what firmware and the boot loader do on
// metal. It is part of the multi-call binary (`machined boot --state DIR <machined args>`) and
// stays running as the parent of the node's machined for the node's whole life:
//
//   - on first start it installs the running binary (or a signed image given with --image) into
//     slot A of BOOT;
//   - each boot it reads META and starts machined from the active slot, or once from the other
//     slot when boot-once is set (after an upgrade); the slot being tried is recorded in META;
//   - machined reports a successful boot by making its slot the active one in META
//     (slots.MarkBootSuccessful); a trial slot that exits, asks for a reboot or does not report
//     within --boot-timeout before doing so is abandoned and the node boots the previous
//     slot again (automatic rollback);
//   - a reboot is machined exiting with ExitReboot: the boot stage boots again, reading META
//     afresh; exit 0 is a shutdown and ends the boot stage;
//   - any other end of machined (kill -9, a panic, an error exit) is a crash: a real machine's
//     kernel panics when PID 1 dies and it reboots, so the boot stage boots again, bounded by
//     CrashLimit crashes in a row soon after start (then it exits with the error).
package bootloader

import (
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/slots"
)

// Environment the boot stage gives machined.
const (
	// EnvBootStage is set when machined runs under the boot stage: a reboot is then an exit with
	// ExitReboot instead of an exec in place.
	EnvBootStage = "TALOS_BOOT_STAGE"
)

// ExitReboot is the exit code with which machined asks the boot stage for a reboot.
const ExitReboot = 75

// SlotBinary is the multi-call binary of a slot.
func SlotBinary(bootDir, slot string) string { return filepath.Join(bootDir, slot, "machined") }

// SlotInstalled reports whether a slot holds a binary.
func SlotInstalled(bootDir, slot string) bool {
	fi, err := os.Stat(SlotBinary(bootDir, slot))

	return err == nil && fi.Mode().IsRegular()
}

// UnderBootStage reports whether this process runs under the boot stage.
func UnderBootStage() bool { return os.Getenv(EnvBootStage) != "" && slots.Current() != "" }
