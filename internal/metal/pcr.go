package metal

import (
	"bytes"
	"crypto/rsa"
	"encoding/hex"

	"github.com/talos-go/talos/internal/tpmseal"
	"github.com/talos-go/talos/internal/uki"
)

// pcrPhases extends PCR 11 with the boot's phases (uki's, upstream's names) when a UKI's stub
// measured the UKI into it; a boot of a kernel and initramfs from GRUB leaves PCR 11 alone.
type pcrPhases struct{ measured bool }

// startPhases reads PCR 11 as the stub left it and extends the first phase.
func startPhases() pcrPhases {
	t, err := tpmseal.Open()
	if err != nil {
		return pcrPhases{} // no TPM: nothing measured
	}
	defer t.Close()

	v, err := tpmseal.ReadSigned(t)
	if err != nil || bytes.Equal(v, make([]byte, len(v))) {
		return pcrPhases{}
	}

	log("TPM PCR 11 at boot: %s (the UKI's stub measured it)", hex.EncodeToString(v))

	p := pcrPhases{measured: true}
	p.extend(uki.EnterInitrd)

	return p
}

// extend extends PCR 11 with phases; a failure is logged (a key sealed to the signed phase then
// does not unseal, and says so).
func (p pcrPhases) extend(phases ...string) {
	if !p.measured {
		return
	}

	t, err := tpmseal.Open()
	if err != nil {
		log("TPM: %v", err)

		return
	}
	defer t.Close()

	for _, ph := range phases {
		if err = tpmseal.ExtendPhase(t, ph); err != nil {
			log("TPM: %v", err)

			return
		}
	}
}

// bootedPCRSigning is the PCR signing key and signed PCR 11 policies the stub handed this boot.
func bootedPCRSigning() (*rsa.PublicKey, []tpmseal.SignedPolicy, bool, error) {
	return uki.Booted("")
}
