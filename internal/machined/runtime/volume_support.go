package runtime

import (
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/uservolume"
)

// VolumeSupport refuses the volume settings this node cannot do, each naming its field:
// encryption with a provider other than luks2, unknown options or TPM-sealed keys (not
// implemented yet), and user volumes it cannot provision (uservolume.Check).
func VolumeSupport(cfg config.Config) error {
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

	for _, v := range cfg.UserVolumeConfigs() {
		errs = append(errs, uservolume.Check(v))
	}

	return errors.Join(errs...)
}
