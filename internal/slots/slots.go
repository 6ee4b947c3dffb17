// Package slots is the A/B choice shared by every kind of node: which slot of BOOT boots next,
// from the keys in META. The process nodes' boot stage (internal/bootloader) and the initramfs
// of an installed metal node (with GRUB, grub.go) both decide with Choose; machined reports a
// successful boot with MarkBootSuccessful.
package slots

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/talos-go/talos/internal/meta"
)

// Slot names.
const (
	A = "A"
	B = "B"
)

// EnvSlot names, in machined's environment, the slot it was started from.
const EnvSlot = "TALOS_BOOT_SLOT"

// Other returns the other slot.
func Other(slot string) string {
	if slot == B {
		return A
	}

	return B
}

// Valid reports whether s names a slot.
func Valid(s string) bool { return s == A || s == B }

// Dir is a slot's folder in BOOT.
func Dir(bootDir, slot string) string { return filepath.Join(bootDir, slot) }

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
		active = A
		v[meta.ActiveSlot] = active
	}

	if !Valid(active) {
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
		case !Valid(once):
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
