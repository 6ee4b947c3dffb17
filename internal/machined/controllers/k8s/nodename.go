package k8s

import (
	"context"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// NodenameController publishes the node's name in Kubernetes.
type NodenameController = transform.Controller[*network.HostnameStatus, *k8s.Nodename]

// NewNodenameController declares Nodename as upstream: the hostname, or the FQDN with
// machine.kubelet.registerWithFQDN, lowercased; the hostname's version tells kubelet's runtime
// which hostname it was made from.
func NewNodenameController() *NodenameController {
	return transform.NewController(
		transform.Settings[*network.HostnameStatus, *k8s.Nodename]{
			Name: "k8s.NodenameController",
			MapMetadataOptionalFunc: func(h *network.HostnameStatus) optional.Optional[*k8s.Nodename] {
				if h.Metadata().ID() != network.HostnameID {
					return optional.None[*k8s.Nodename]()
				}

				return optional.Some(k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, h *network.HostnameStatus, out *k8s.Nodename) error {
				cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
				if err != nil {
					if state.IsNotFoundError(err) {
						return xerrors.NewTaggedf[transform.SkipReconcileTag]("waiting for the machine config")
					}

					return err
				}

				if cfg.Config().Machine() == nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("the machine config has no machine section")
				}

				// The hostname starts as a generated one and becomes the config's a moment later: a
				// kubelet started in between would bootstrap its client certificate for the wrong
				// node name and be refused its own Node ever after.
				if configured, _, _ := strings.Cut(cfg.Config().Machine().Network().Hostname(), "."); configured != "" &&
					!strings.EqualFold(configured, h.TypedSpec().Hostname) {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("waiting for the configured hostname %q (now %q)", configured, h.TypedSpec().Hostname)
				}

				kubelet := cfg.Config().Machine().Kubelet()
				name := h.TypedSpec().Hostname

				if kubelet.RegisterWithFQDN() {
					name = h.TypedSpec().FQDN()
				}

				spec := out.TypedSpec()
				spec.Nodename = strings.ToLower(name)
				spec.HostnameVersion = h.Metadata().Version().String()
				spec.SkipNodeRegistration = kubelet.SkipNodeRegistration()

				return nil
			},
		},
		transform.WithExtraInputs(controller.Input{
			Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak,
		}),
	)
}
