package runtime

import (
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
)

// ErrIncomplete is what every refusal of RequireV1Alpha1 wraps, and what the user reads last.
var ErrIncomplete = errors.New("a node's config must hold the v1alpha1 document (version: v1alpha1, with machine: and cluster:); " +
	"apply the whole config, with your other documents beside it")

// RequireV1Alpha1 refuses a config without the v1alpha1 document, or whose v1alpha1 document
// lost machine: or cluster: (`$patch: delete`). machinery loads such a config (a
// WatchdogTimerConfig alone, say) and its documents validate, but a node cannot run on it: a
// control plane that took one rebooted into a boot that never served apid again. Upstream
// refuses it too.
func RequireV1Alpha1(cfg config.Provider) error {
	if cfg == nil || cfg.RawV1Alpha1() == nil {
		return fmt.Errorf("the config has no v1alpha1 document: %w", ErrIncomplete)
	}

	missing := ""

	switch v := cfg.RawV1Alpha1(); {
	case v.MachineConfig == nil:
		missing = "machine:"
	case v.ClusterConfig == nil:
		missing = "cluster:"
	default:
		return nil
	}

	return fmt.Errorf("the config's v1alpha1 document has no %s section: %w", missing, ErrIncomplete)
}
