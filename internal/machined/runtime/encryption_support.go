package runtime

import (
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/encryption"
)

// EncryptionSupport refuses the volume encryption this node cannot do: a provider other than
// luks2, unknown options, and TPM-sealed keys (not implemented yet), each naming its field.
func EncryptionSupport(cfg config.Config) error {
	var errs []error

	for _, label := range []string{"STATE", "EPHEMERAL"} {
		spec, err := encryption.FromConfig(cfg, label)
		if err != nil {
			errs = append(errs, err)

			continue
		}

		for _, k := range spec.KeysOf("tpm") {
			errs = append(errs, fmt.Errorf("%s encryption key slot %d: TPM-sealed keys are not supported yet; use nodeID, static or kms keys", label, k.Slot))
		}
	}

	return errors.Join(errs...)
}
