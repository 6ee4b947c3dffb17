package bootloader

import (
	"fmt"
	"os"

	"github.com/talos-go/talos/internal/meta"
)

// CurrentSlot is the slot this process was started from by the boot stage ("" when machined
// was started directly).
func CurrentSlot() string {
	s := os.Getenv(EnvSlot)
	if ValidSlot(s) {
		return s
	}

	return ""
}

// UnderBootStage reports whether this process runs under the boot stage.
func UnderBootStage() bool { return os.Getenv(EnvBootStage) != "" && CurrentSlot() != "" }

// MarkBootSuccessful is called by machined once the node has booted healthily: a slot being
// tried becomes the active slot (the upgrade is now permanent). It reports whether a trial was
// completed.
func MarkBootSuccessful(store *meta.Store, slot string) (bool, error) {
	if !ValidSlot(slot) {
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
