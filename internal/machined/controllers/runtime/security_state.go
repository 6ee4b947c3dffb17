package runtime

import (
	"context"
	"crypto/fips140"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// The UEFI global variables' GUID, and the files efivarfs names them by.
const (
	efiGlobal  = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
	secureBoot = "SecureBoot-" + efiGlobal
	setupMode  = "SetupMode-" + efiGlobal
)

// SecurityStateController publishes the node's security state (SecurityState, upstream's
// meaning), read once: it is fixed at boot. A node with the machine (metal) says whether the
// firmware booted with Secure Boot enforced (SecureBoot set, SetupMode not), whether it booted a
// UKI (the stub handed over its PCR public key) and that key's fingerprint, and SELinux's mode;
// a container or process node says only what belongs to it, the FIPS mode of its binary, as the
// rest is the host's. The UKI's signing certificate is not known inside the node: left empty.
type SecurityStateController struct {
	OwnsMachine bool
	Efivars     string // /sys/firmware/efi/efivars
	PCRKey      string // the PEM public key the stub hands over (uki.PublicKeyFile in the initramfs)
	SELinux     string // /sys/fs/selinux/enforce
}

// Name implements controller.Controller.
func (ctrl *SecurityStateController) Name() string { return "runtime.SecurityStateController" }

// Inputs implements controller.Controller.
func (ctrl *SecurityStateController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *SecurityStateController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.SecurityStateType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *SecurityStateController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	var spec runtimeres.SecurityStateSpec

	if fips140.Enabled() {
		spec.FIPSState = runtimeres.FIPSStateEnabled
	}

	if ctrl.OwnsMachine {
		var err error
		if spec, err = ctrl.machineState(spec); err != nil {
			return err
		}
	}

	if err := safe.WriterModify(ctx, r, runtimeres.NewSecurityStateSpec(runtimeres.NamespaceName), func(res *runtimeres.SecurityState) error {
		*res.TypedSpec() = spec

		return nil
	}); err != nil {
		return err
	}

	<-ctx.Done()

	return nil
}

func (ctrl *SecurityStateController) machineState(spec runtimeres.SecurityStateSpec) (runtimeres.SecurityStateSpec, error) {
	// An efivarfs variable is 4 bytes of attributes, then its value.
	efiFlag := func(name string) bool {
		b, err := os.ReadFile(filepath.Join(ctrl.Efivars, name))

		return err == nil && len(b) == 5 && b[4] == 1
	}

	spec.SecureBoot = efiFlag(secureBoot) && !efiFlag(setupMode)

	switch b, err := os.ReadFile(ctrl.PCRKey); {
	case errors.Is(err, fs.ErrNotExist): // not booted from a UKI
	case err != nil:
		return spec, fmt.Errorf("reading the PCR public key: %w", err)
	default:
		block, _ := pem.Decode(b)
		if block == nil {
			return spec, fmt.Errorf("%s holds no PEM block", ctrl.PCRKey)
		}

		spec.BootedWithUKI, spec.PCRSigningKeyFingerprint = true, fingerprint(block.Bytes)
	}

	if b, err := os.ReadFile(ctrl.SELinux); err == nil {
		spec.SELinuxState = runtimeres.SELinuxStatePermissive
		if strings.TrimSpace(string(b)) == "1" {
			spec.SELinuxState = runtimeres.SELinuxStateEnforcing
		}
	}

	return spec, nil
}

// fingerprint is upstream's form: the SHA-256 of the DER bytes, upper-case hex pairs joined by
// colons.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))

	pairs := make([]string, 0, len(sum))
	for i := 0; i < len(h); i += 2 {
		pairs = append(pairs, h[i:i+2])
	}

	return strings.Join(pairs, ":")
}
