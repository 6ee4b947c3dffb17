package runtime_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
	"github.com/talos-go/talos/internal/version"
)

func TestVersionController(t *testing.T) {
	e := ctest.Start(t, &runtimectrl.VersionController{})

	ctest.AssertResource(e, "version", func(r *runtimeres.Version, a *assert.Assertions) {
		a.Equal(version.Tag, r.TypedSpec().Version)
	})
}

func TestKernelCmdlineController(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cmdline")
	require.NoError(t, os.WriteFile(path, []byte("talos.platform=metal console=ttyS0 init_on_alloc=1\n"), 0o644))

	e := ctest.Start(t, &runtimectrl.KernelCmdlineController{Path: path})

	ctest.AssertResource(e, runtimeres.KernelCmdlineID, func(r *runtimeres.KernelCmdline, a *assert.Assertions) {
		a.Equal("talos.platform=metal console=ttyS0 init_on_alloc=1", r.TypedSpec().Cmdline)
	})
}

func TestSBOMItemController(t *testing.T) {
	items := []runtimeres.SBOMItemSpec{{Name: "etcd", Version: "v3.6.13"}, {Name: "containerd", Version: "v2.1.4"}}
	e := ctest.Start(t, &runtimectrl.SBOMItemController{Items: items})

	ctest.AssertResources(e, []string{"etcd", "containerd"}, func(r *runtimeres.SBOMItem, a *assert.Assertions) {
		a.Equal(map[string]string{"etcd": "v3.6.13", "containerd": "v2.1.4"}[r.Metadata().ID()], r.TypedSpec().Version)
		a.Equal(r.Metadata().ID(), r.TypedSpec().Name)
	})
}

// machineView writes a machine's view for the security state: efivars' SecureBoot and SetupMode
// (4 attribute bytes, then the value), the stub's PCR public key, SELinux's enforce file.
func machineView(t *testing.T, secureBoot, setupMode byte, withKey bool) (ctrl *runtimectrl.SecurityStateController, der []byte) {
	dir := t.TempDir()
	ctrl = &runtimectrl.SecurityStateController{OwnsMachine: true, Efivars: dir, PCRKey: filepath.Join(dir, "pcr.pem"), SELinux: filepath.Join(dir, "enforce")}

	for name, v := range map[string]byte{"SecureBoot": secureBoot, "SetupMode": setupMode} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+"-8be4df61-93ca-11d2-aa0d-00e098032b8c"), []byte{6, 0, 0, 0, v}, 0o644))
	}

	if withKey {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)

		der, err = x509.MarshalPKIXPublicKey(&key.PublicKey)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(ctrl.PCRKey, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644))
	}

	return ctrl, der
}

func TestSecurityStateController(t *testing.T) {
	t.Run("secure boot, UKI", func(t *testing.T) {
		ctrl, der := machineView(t, 1, 0, true)
		sum := sha256.Sum256(der)

		pairs := make([]string, 0, len(sum)) // upstream's form: upper-case hex pairs joined by colons
		for _, b := range sum {
			pairs = append(pairs, fmt.Sprintf("%02X", b))
		}

		e := ctest.Start(t, ctrl)
		ctest.AssertResource(e, runtimeres.SecurityStateID, func(r *runtimeres.SecurityState, a *assert.Assertions) {
			s := r.TypedSpec()
			a.True(s.SecureBoot)
			a.True(s.BootedWithUKI)
			a.Equal(strings.Join(pairs, ":"), s.PCRSigningKeyFingerprint)
			a.Equal(runtimeres.SELinuxStateDisabled, s.SELinuxState)
			a.Empty(s.UKISigningKeyFingerprint)
		})
	})

	t.Run("setup mode, no UKI", func(t *testing.T) {
		ctrl, _ := machineView(t, 1, 1, false) // keys not enrolled: Secure Boot is not enforced
		e := ctest.Start(t, ctrl)
		ctest.AssertResource(e, runtimeres.SecurityStateID, func(r *runtimeres.SecurityState, a *assert.Assertions) {
			a.False(r.TypedSpec().SecureBoot)
			a.False(r.TypedSpec().BootedWithUKI)
			a.Empty(r.TypedSpec().PCRSigningKeyFingerprint)
		})
	})

	t.Run("not the machine's", func(t *testing.T) {
		ctrl, _ := machineView(t, 1, 0, true)
		ctrl.OwnsMachine = false // a container or process node: the firmware is the host's

		e := ctest.Start(t, ctrl)
		ctest.AssertResource(e, runtimeres.SecurityStateID, func(r *runtimeres.SecurityState, a *assert.Assertions) {
			a.Equal(runtimeres.SecurityStateSpec{}, *r.TypedSpec())
		})
	})
}
