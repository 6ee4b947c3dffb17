package slots

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/talos-go/talos/internal/meta"
)

// MetalBoot is what the initramfs of an installed node decided.
type MetalBoot struct {
	Decision
	WipeEphemeral bool     // a trial of an upgrade without --preserve: EPHEMERAL starts empty
	ResetWipe     []string // partitions a reset began wiping and did not finish (cleared by the caller once wiped)
}

var bootImageRE = regexp.MustCompile(`(?:^|\s)BOOT_IMAGE=/?([AB])/(?:vmlinuz|uki\.efi)(?:\s|$)`)

// Booted is the slot GRUB booted, from the kernel's command line ("" when it names none).
func Booted(cmdline string) string {
	if m := bootImageRE.FindStringSubmatch(cmdline); m != nil {
		return m[1]
	}

	return ""
}

// ChooseBooted is the boot stage's decision on metal, where GRUB has already booted a slot:
// META is read and updated as the boot stage does (Choose), and GRUB's default is pointed at
// the active slot, so a slot being tried is booted only this once. When GRUB booted another
// slot than META names (picked in GRUB's menu), the booted slot runs and becomes active.
func ChooseBooted(bootDir string, store *meta.Store, booted string) (MetalBoot, error) {
	var (
		b      MetalBoot
		active string
	)

	installed := func(slot string) bool { return KernelSlotInstalled(bootDir, slot) }

	err := store.Update(func(v meta.Values) error {
		d, err := Choose(v, installed)
		if err != nil || d.Slot != booted {
			why := fmt.Sprintf("META chose slot %s", d.Slot)
			if err != nil {
				why = err.Error()
			}

			v[meta.ActiveSlot], v[meta.TrialSlot], v[meta.BootOnce], v[meta.WipeEphemeral] = booted, "", "", ""
			d = Decision{Slot: booted, Reason: fmt.Sprintf("GRUB booted slot %s (%s): it is the active slot now", booted, why)}
		}

		b.Decision = d

		if d.Trial && v[meta.WipeEphemeral] != "" {
			v[meta.WipeEphemeral] = ""
			b.WipeEphemeral = true
		}

		for _, label := range strings.Split(v[meta.ResetWipe], ",") {
			if label == "STATE" || label == "EPHEMERAL" { // META is ours; a wipe goes only where a reset may
				b.ResetWipe = append(b.ResetWipe, label)
			}
		}

		v[meta.LastBoot] = d.Slot
		if d.Trial {
			v[meta.LastBoot] += " (trial)"
		}

		active = v[meta.ActiveSlot]

		return nil
	})
	if err != nil {
		return b, fmt.Errorf("reading META: %w", err)
	}

	if err = SetGRUBDefault(bootDir, active); err != nil {
		return b, fmt.Errorf("pointing GRUB at the active slot %s: %w", active, err)
	}

	return b, nil
}
