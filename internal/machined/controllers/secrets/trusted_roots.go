package secrets

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/trustbundle"
)

// TrustedRootsController writes the node's trust bundle, as upstream's: the system's CA
// certificates and the roots of the config's TrustedRootsConfig documents (Build). A node in
// its own root has it bound over /etc/ssl/certs/ca-certificates.crt, where containerd, kubelet
// and machined's fetches read it.
type TrustedRootsController struct {
	// System is the system's bundle; Bundle is the node's, rewritten in place.
	System, Bundle string
}

// Name implements controller.Controller.
func (ctrl *TrustedRootsController) Name() string { return "secrets.TrustedRootsController" }

// Inputs implements controller.Controller.
func (ctrl *TrustedRootsController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: configres.NamespaceName, Type: configres.MachineConfigType, ID: optional.Some(configres.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *TrustedRootsController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *TrustedRootsController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		// A node without a system bundle (a host without one, in process mode) has the
		// config's roots alone.
		system, err := os.ReadFile(ctrl.System)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("reading the system's CA bundle: %w", err)
		}

		var cfg config.Config

		res, err := safe.ReaderGetByID[*configres.MachineConfig](ctx, r, configres.ActiveID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading the machine config: %w", err)
		}

		if res != nil {
			cfg = res.Config()
		}

		written, err := trustbundle.Write(ctrl.Bundle, trustbundle.Build(system, cfg))
		if err != nil {
			return err
		}

		if written {
			n := 0
			if cfg != nil {
				n = len(cfg.TrustedRoots().ExtraTrustedRootCertificates())
			}

			log.Info("wrote the node's trust bundle", zap.String("path", ctrl.Bundle), zap.Int("trusted_roots_documents", n))
		}
	}
}
