package kubespan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/eui64"
)

// IdentityController publishes the node's KubeSpan identity: a WireGuard key pair, made once and
// kept on STATE (upstream's kubespan-identity.yaml), and an address in the cluster's KubeSpan
// network derived from the first physical link's MAC address.
type IdentityController struct {
	StateDir string
}

// Name implements controller.Controller.
func (ctrl *IdentityController) Name() string { return "kubespan.IdentityController" }

// Inputs implements controller.Controller.
func (ctrl *IdentityController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: kubespan.ConfigType, ID: optional.Some(kubespan.ConfigID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.LinkStatusType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *IdentityController) Outputs() []controller.Output {
	return []controller.Output{{Type: kubespan.IdentityType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *IdentityController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*kubespan.Config](ctx, r, kubespan.ConfigID)
		if err != nil && !state.IsNotFoundError(err) {
			return err
		}

		r.StartTrackingOutputs()

		if cfg != nil && cfg.TypedSpec().Enabled {
			mac, err := firstMAC(ctx, r)
			if err != nil {
				return err
			}

			if mac != nil {
				id, err := ctrl.load(cfg.TypedSpec().ClusterID, mac)
				if err != nil {
					return err
				}

				if err = safe.WriterModify(ctx, r, kubespan.NewIdentity(kubespan.NamespaceName, kubespan.LocalIdentity), func(res *kubespan.Identity) error {
					*res.TypedSpec() = *id

					return nil
				}); err != nil {
					return fmt.Errorf("writing the KubeSpan identity: %w", err)
				}
			}
		}

		if err = safe.CleanupOutputs[*kubespan.Identity](ctx, r); err != nil {
			return err
		}
	}
}

// load reads the identity from STATE, making the key pair on first use; the address follows
// the cluster and the MAC address.
func (ctrl *IdentityController) load(clusterID string, mac net.HardwareAddr) (*kubespan.IdentitySpec, error) {
	path := filepath.Join(ctrl.StateDir, constants.KubeSpanIdentityFilename)

	var id kubespan.IdentitySpec

	b, err := os.ReadFile(path)

	switch {
	case err == nil:
		if err = yaml.Unmarshal(b, &id); err != nil {
			return nil, fmt.Errorf("%s: %w (delete it to make a new KubeSpan key)", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, err
	}

	changed := false

	if _, err = wgtypes.ParseKey(id.PrivateKey); err != nil {
		key, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return nil, err
		}

		id.PrivateKey, id.PublicKey, changed = key.String(), key.PublicKey().String(), true
	}

	subnet, addr := Address(clusterID, mac)
	if id.Subnet != subnet || id.Address != addr {
		id.Subnet, id.Address, changed = subnet, addr, true
	}

	if changed {
		out, err := yaml.Marshal(&id) //nolint:gosec // the identity file is where the key is kept (0600 on STATE), as upstream
		if err != nil {
			return nil, err
		}

		if err = atomicfile.WriteFile(path, out, 0o600); err != nil {
			return nil, fmt.Errorf("saving the KubeSpan identity: %w", err)
		}
	}

	return &id, nil
}

// Address is the cluster's KubeSpan network (upstream's ULA prefix for KubeSpan, from the cluster
// ID) and the node's address in it: the network's prefix with the modified EUI-64 interface
// identifier of mac (RFC 4291).
func Address(clusterID string, mac net.HardwareAddr) (subnet, addr netip.Prefix) {
	subnet = network.ULAPrefix(clusterID, network.ULAKubeSpan)

	return subnet, netip.PrefixFrom(eui64.Address(subnet, mac), 128)
}

// firstMAC is the MAC address of the first physical link by name; nil while none is known.
func firstMAC(ctx context.Context, r controller.Reader) (net.HardwareAddr, error) {
	links, err := safe.ReaderListAll[*network.LinkStatus](ctx, r)
	if err != nil {
		return nil, err
	}

	var names []string

	byName := map[string]net.HardwareAddr{}

	for l := range links.All() {
		s := l.TypedSpec()
		if s.Physical() && len(s.HardwareAddr) == 6 { // not a logical link: never kubespan itself
			names = append(names, l.Metadata().ID())
			byName[l.Metadata().ID()] = net.HardwareAddr(s.HardwareAddr)
		}
	}

	if len(names) == 0 {
		return nil, nil
	}

	slices.Sort(names)

	return byName[names[0]], nil
}
