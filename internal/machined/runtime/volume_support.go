package runtime

import (
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/uservolume"
)

// VolumeSupport refuses the volume settings this node cannot do, each naming its field:
// encryption with a provider other than luks2 or unknown options, and user volumes it cannot
// provision (uservolume.Check).
func VolumeSupport(cfg config.Config) error {
	var errs []error

	for _, label := range []string{"STATE", "EPHEMERAL"} {
		if _, err := encryption.FromConfig(cfg, label); err != nil {
			errs = append(errs, err)
		}
	}

	for _, v := range cfg.UserVolumeConfigs() {
		errs = append(errs, uservolume.Check(v))
	}

	return errors.Join(errs...)
}
