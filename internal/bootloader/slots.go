// Package bootloader is the container-mode boot stage: what firmware and the boot loader do on
// metal. It is part of the multi-call binary (`machined boot --state DIR <machined args>`) and
// stays running as the parent of the node's machined for the node's whole life:
//
//   - on first start it installs the running binary (or a signed image given with --image) into
//     slot A of BOOT;
//   - each boot it reads META and starts machined from the active slot, or once from the other
//     slot when boot-once is set (after an upgrade); the slot being tried is recorded in META;
//   - machined reports a successful boot by making its slot the active one in META
//     (MarkBootSuccessful); a trial slot that exits, asks for a reboot or does not report
//     within --boot-timeout before doing so is abandoned and the node boots the previous
//     slot again (automatic rollback);
//   - a reboot is machined exiting with ExitReboot: the boot stage boots again, reading META
//     afresh; exit 0 is a shutdown and ends the boot stage;
//   - any other end of machined (kill -9, a panic, an error exit) is a crash: a real machine's
//     kernel panics when PID 1 dies and it reboots, so the boot stage boots again, bounded by
//     CrashLimit crashes in a row soon after start (then it exits with the error).
package bootloader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/meta"
)

// Slot names.
const (
	SlotA = "A"
	SlotB = "B"
)

// Environment the boot stage gives machined.
const (
	// EnvSlot names the slot machined was started from.
	EnvSlot = "TALOS_BOOT_SLOT"
	// EnvBootStage is set when machined runs under the boot stage: a reboot is then an exit with
	// ExitReboot instead of an exec in place.
	EnvBootStage = "TALOS_BOOT_STAGE"
)

// ExitReboot is the exit code with which machined asks the boot stage for a reboot.
const ExitReboot = 75

// Other returns the other slot.
func Other(slot string) string {
	if slot == SlotB {
		return SlotA
	}

	return SlotB
}

// ValidSlot reports whether s names a slot.
func ValidSlot(s string) bool { return s == SlotA || s == SlotB }

// SlotDir is a slot's folder in BOOT.
func SlotDir(bootDir, slot string) string { return filepath.Join(bootDir, slot) }

// SlotBinary is the multi-call binary of a slot.
func SlotBinary(bootDir, slot string) string { return filepath.Join(bootDir, slot, "machined") }

// SlotInstalled reports whether a slot holds a binary.
func SlotInstalled(bootDir, slot string) bool {
	fi, err := os.Stat(SlotBinary(bootDir, slot))

	return err == nil && fi.Mode().IsRegular()
}

// Decision is which slot to boot and why.
type Decision struct {
	Slot   string
	Trial  bool   // the slot is being tried once (after an upgrade)
	Reason string // for the log and META
}

// Choose decides the next boot from META (v is updated in place and must be saved) and the
// installed slots.
func Choose(v meta.Values, installed func(slot string) bool) (Decision, error) {
	active := v[meta.ActiveSlot]
	if active == "" {
		active = SlotA
		v[meta.ActiveSlot] = active
	}

	if !ValidSlot(active) {
		return Decision{}, fmt.Errorf("META %s=%q is not a slot: set it to A or B", meta.ActiveSlot, active)
	}

	if trial := v[meta.TrialSlot]; trial != "" {
		// The last boot tried a slot and it never reported success: back to the active slot.
		v[meta.TrialSlot] = ""
		v[meta.BootOnce] = ""
		v[meta.WipeEphemeral] = ""
		v[meta.Fallback] = fmt.Sprintf("slot %s (%s) did not report a successful boot; booted slot %s again", trial, v[meta.UpgradeTo], active)

		if !installed(active) {
			return Decision{}, fmt.Errorf("slot %s did not boot and the previous slot %s is empty: reinstall the node", trial, active)
		}

		return Decision{Slot: active, Reason: "fallback: " + v[meta.Fallback]}, nil
	}

	if once := v[meta.BootOnce]; once != "" {
		v[meta.BootOnce] = ""

		switch {
		case !ValidSlot(once):
			v[meta.Fallback] = fmt.Sprintf("boot-once slot %q is not a slot", once)
		case once == active:
			// Nothing to try.
		case !installed(once):
			v[meta.Fallback] = fmt.Sprintf("boot-once slot %s is empty", once)
		default:
			v[meta.TrialSlot] = once
			v[meta.Fallback] = ""

			return Decision{Slot: once, Trial: true, Reason: "trying slot " + once + " once"}, nil
		}
	}

	if !installed(active) {
		if installed(Other(active)) {
			v[meta.ActiveSlot] = Other(active)

			return Decision{Slot: Other(active), Reason: "active slot " + active + " is empty"}, nil
		}

		return Decision{}, errors.New("no slot holds a machined binary: start the boot stage once with --image or from a machined binary to install slot A")
	}

	return Decision{Slot: active, Reason: "active slot"}, nil
}
