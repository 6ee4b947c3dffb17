package runtime

import (
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/install"
	"github.com/talos-go/talos/internal/uservolume"
)

// VolumeSupport refuses the volume settings this node cannot do, each naming its field:
// encryption with a provider other than luks2 or unknown options, and user, swap and raw volumes
// it cannot provision (uservolume.Check), and EPHEMERAL's provisioning the installer cannot do.
func VolumeSupport(cfg config.Config) error {
	var errs []error

	for _, label := range []string{"STATE", "EPHEMERAL"} {
		if _, err := encryption.FromConfig(cfg, label); err != nil {
			errs = append(errs, err)
		}
	}

	if _, err := install.EphemeralSizeFromConfig(cfg); err != nil {
		errs = append(errs, err)
	}

	for _, v := range uservolume.Volumes(cfg) {
		errs = append(errs, uservolume.Check(v))
	}

	return errors.Join(errs...)
}
