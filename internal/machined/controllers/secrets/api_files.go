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

	"github.com/talos-go/talos/internal/apid/certs"
)

// APIFilesController writes secrets.API into apid's folder (keys 0600, atomic replace); apid
// reloads the files by itself.
type APIFilesController struct {
	Dir string // <state>/system/secrets/apid

	written resourceVersion
}

type resourceVersion struct {
	set     bool
	version string
}

// Name implements controller.Controller.
func (ctrl *APIFilesController) Name() string { return "secrets.APIFilesController" }

// Inputs implements controller.Controller.
func (ctrl *APIFilesController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: secrets.NamespaceName, Type: secrets.APIType, ID: optional.Some(secrets.APIID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *APIFilesController) Outputs() []controller.Output { return nil }

// APIFiles are apid's files for the API certificates: without a client certificate (a worker),
// none of its files.
func APIFiles(spec *secrets.APICertsSpec) (map[string][]byte, error) {
	if spec.Server == nil || len(spec.AcceptedCAs) == 0 {
		return nil, fmt.Errorf("api certificates are incomplete")
	}

	var bundle bytes.Buffer

	for _, ca := range spec.AcceptedCAs {
		bundle.Write(bytes.TrimSpace(ca.Crt))
		bundle.WriteByte('\n')
	}

	files := map[string][]byte{
		certs.CA:        bundle.Bytes(),
		certs.ServerCrt: spec.Server.Crt,
		certs.ServerKey: spec.Server.Key,
	}

	if spec.Client != nil {
		files[certs.ClientCrt] = spec.Client.Crt
		files[certs.ClientKey] = spec.Client.Key
	}

	return files, nil
}

// Run implements controller.Controller.
func (ctrl *APIFilesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		res, err := safe.ReaderGetByID[*secrets.API](ctx, r, secrets.APIID)
		if err != nil {
			if state.IsNotFoundError(err) {
				continue
			}

			return fmt.Errorf("reading api certificates: %w", err)
		}

		v := res.Metadata().Version().String()
		if ctrl.written.set && ctrl.written.version == v {
			continue
		}

		files, err := APIFiles(res.TypedSpec())
		if err != nil {
			return err
		}

		if err = certs.WriteFiles(ctrl.Dir, files); err != nil {
			return fmt.Errorf("writing apid certificates: %w", err)
		}

		ctrl.written = resourceVersion{set: true, version: v}

		log.Info("wrote apid certificates", zap.String("dir", ctrl.Dir))
	}
}
