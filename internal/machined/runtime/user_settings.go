package runtime

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/siderolabs/talos/pkg/machinery/config"

	crictrl "github.com/talos-go/talos/internal/machined/controllers/cri"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// UserSettings refuses machine.files, machine.env, machine.network.extraHostEntries,
// machine.pods and machine.seccompProfiles the node cannot honour as given, each error naming
// the field and the fix: a file outside /var (other than the CRI config part), an unknown op, a
// CRI part that is not TOML, an environment name that cannot be one, a host entry without a
// valid IP or alias, a pod that is not kind Pod or has no name, a profile name that is a path.
func UserSettings(cfg config.Config) error {
	m := cfg.Machine()
	if m == nil {
		return nil
	}

	files, err := m.Files()
	if err != nil {
		return fmt.Errorf("machine.files: %w", err)
	}

	errs := []error{userfiles.Check(files), userfiles.CheckEnv(m.Env()), k8sctrl.CheckPods(m.Pods()), crictrl.CheckSeccompProfiles(m.SeccompProfiles())}

	if n := m.Network(); n != nil {
		for i, h := range n.ExtraHosts() {
			if _, perr := netip.ParseAddr(h.IP()); perr != nil {
				errs = append(errs, fmt.Errorf("machine.network.extraHostEntries[%d].ip %q: not an IP address; give the host's IPv4 or IPv6 address", i, h.IP()))
			}

			if len(h.Aliases()) == 0 {
				errs = append(errs, fmt.Errorf("machine.network.extraHostEntries[%d].aliases: empty; give at least one name for %s", i, h.IP()))
			}

			for j, a := range h.Aliases() {
				if a == "" || containsSpace(a) {
					errs = append(errs, fmt.Errorf("machine.network.extraHostEntries[%d].aliases[%d] %q: a host name has no blanks or '#'; give one name per alias", i, j, a))
				}
			}
		}
	}

	return errors.Join(errs...)
}

func containsSpace(s string) bool {
	for _, r := range s {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '#' {
			return true
		}
	}

	return false
}
