package slots

import (
	"fmt"
	"os"

	"github.com/talos-go/talos/internal/meta"
)

// Current is the slot this machined was started from by the boot stage or the initramfs (""
// when machined was started directly).
func Current() string {
	s := os.Getenv(EnvSlot)
	if Valid(s) {
		return s
	}

	return ""
}

// MarkBootSuccessful is called by machined once the node has booted healthily: a slot being
// tried becomes the active slot (the upgrade is now permanent). It reports whether a trial was
// completed.
func MarkBootSuccessful(store *meta.Store, slot string) (bool, error) {
	if !Valid(slot) {
		return false, nil
	}

	done := false

	err := store.Update(func(v meta.Values) error {
		if v[meta.TrialSlot] != slot {
			return nil
		}

		v[meta.ActiveSlot] = slot
		v[meta.TrialSlot] = ""
		v[meta.Fallback] = ""
		done = true

		return nil
	})
	if err != nil {
		return false, fmt.Errorf("marking slot %s as booted: %w", slot, err)
	}

	return done, nil
}
