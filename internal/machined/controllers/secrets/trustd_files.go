package secrets

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/trustd"
)

// TrustdFilesController writes trustd's folder: the CA and its key, the token and trustd's
// serving certificate (all 0600). Nothing else reaches the trustd process. An empty token (no
// machine.token) is written as such: trustd then accepts joins by approval only.
type TrustdFilesController struct {
	Dir string // <state>/system/secrets/trustd
}

// Name implements controller.Controller.
func (ctrl *TrustdFilesController) Name() string { return "secrets.TrustdFilesController" }

// Inputs implements controller.Controller.
func (ctrl *TrustdFilesController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.OSRootType, ID: optional.Some(secrets.OSRootID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.TrustdType, ID: optional.Some(secrets.TrustdID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *TrustdFilesController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *TrustdFilesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		root, err := safe.ReaderGetByID[*secrets.OSRoot](ctx, r, secrets.OSRootID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading os root: %w", err)
		}

		crt, err := safe.ReaderGetByID[*secrets.Trustd](ctx, r, secrets.TrustdID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading trustd certificate: %w", err)
		}

		if root == nil || crt == nil || !hasKey(root.TypedSpec()) || crt.TypedSpec().Server == nil {
			continue
		}

		var bundle bytes.Buffer

		for _, ca := range crt.TypedSpec().AcceptedCAs {
			bundle.Write(bytes.TrimSpace(ca.Crt))
			bundle.WriteByte('\n')
		}

		if err = trustd.WriteFiles(ctrl.Dir, map[string][]byte{
			trustd.CACrt:     bundle.Bytes(),
			trustd.CAKey:     root.TypedSpec().IssuingCA.Key,
			trustd.TokenFile: []byte(root.TypedSpec().Token),
			trustd.ServerCrt: crt.TypedSpec().Server.Crt,
			trustd.ServerKey: crt.TypedSpec().Server.Key,
		}); err != nil {
			return fmt.Errorf("writing trustd secrets: %w", err)
		}

		log.Info("wrote trustd secrets", zap.String("dir", ctrl.Dir))
	}
}
